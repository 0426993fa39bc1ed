# Sourced by smp-floor.sh and floor-pairs.sh: the emulated device under a floor measurement.
# floor_device DEV SMP FLOOR sets `disk` (QEMU's arguments: an 8 GiB null-co drive behind
# megasas-gen2 for DEV=md, or an NVMe controller with SMP I/O queue pairs for DEV=nvme) and
# `words` (the kernel's floor word with FLOOR reads per burst, and the job's device).
floor_device() {
  local nullco=(-blockdev driver=null-co,node-name=d0,size=8589934592,read-zeroes=on)
  if [ "$1" = md ]; then
    disk=("${nullco[@]}" -device megasas-gen2,id=hba0 -device scsi-hd,drive=d0,bus=hba0.0)
    words="megasas.floor=$3 device=md0"
  else
    disk=("${nullco[@]}" -device "nvme,id=nvme0,serial=floor0,max_ioqpairs=$2,msix_qsize=$(($2 + 1))"
          -device nvme-ns,drive=d0,bus=nvme0,nsid=1)
    words="nvme.floor=$3 device=nvme0n1"
  fi
}
