//! `cargo xtask qemu-fusion`: QEMU with the emulated MegaRAID Fusion controller
//! (`qemu/megasas-fusion/`, GPL-2.0-or-later, kept apart from the MIT/Apache code).
//!
//! Fetches Debian's source package of the installed `qemu-system-x86` (QEMU 7.2), unpacks it
//! with Debian's patches into a cache outside the checkout, adds the device file and the two
//! build lines it needs by script (no patch with QEMU context), configures a minimal
//! `x86_64-softmmu` (no optional features, only the devices the scenarios and the Linux peer
//! use) and builds it. The cache directory is keyed by a hash of the source version, the device
//! files and this build recipe, so a change to any of them rebuilds and an unchanged tree
//! reuses the binary.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The device's folder, relative to the workspace root.
const DEVICE_DIR: &str = "qemu/megasas-fusion";
/// The device's one translation unit inside QEMU's `hw/scsi/` (what meson compiles).
const DEVICE_FILE: &str = "megasas-fusion.c";
/// The device's files, copied into `hw/scsi/` as they are: the translation unit and the parts it
/// includes (QEMU's `.c.inc` convention).
const DEVICE_FILES: &[&str] = &[
    DEVICE_FILE,
    "megasas-fusion-raid.c.inc",
    "megasas-fusion-dcmd.c.inc",
    "megasas-fusion-regs.c.inc",
];

/// Kconfig symbol of the device, appended to `hw/scsi/Kconfig`.
const KCONFIG_BLOCK: &str = "
config MEGASAS_FUSION
    bool
    default y if PCI_DEVICES
    depends on PCI
    select SCSI
";

/// Build line appended to `hw/scsi/meson.build`: `softmmu_ss` (not the directory's own
/// `scsi_ss`, which is already consumed at that point) is read only after every directory.
const MESON_LINE: &str = "\nsoftmmu_ss.add(when: 'CONFIG_MEGASAS_FUSION', if_true: files('megasas-fusion.c'))\n";

/// Device set of the minimal build (`configs/devices/x86_64-softmmu/baremq-fusion.mak`):
/// the two PC machines, the exit port, the parallel port a default `pc` machine creates, the
/// controllers baremq's scenarios and the Linux
/// peer attach (scsi-hd comes with SCSI), a VGA so that `-nographic` runs need no
/// `-vga none`, PCIe root ports and virtio-blk. (No PCI expander bridge: in 7.2 it needs the
/// CXL code too.)
const DEVICE_CONFIG: &str = "\
CONFIG_Q35=y
CONFIG_I440FX=y
CONFIG_ISA_DEBUG=y
CONFIG_PARALLEL=y
CONFIG_VGA_PCI=y
CONFIG_MEGASAS_SCSI_PCI=y
CONFIG_MEGASAS_FUSION=y
CONFIG_NVME_PCI=y
CONFIG_PCIE_PORT=y
CONFIG_VIRTIO_PCI=y
CONFIG_VIRTIO_BLK=y
";

/// `configure` options: one target, every optional feature off, TCG (with plugins) and KVM on, firmware
/// from the distribution's packages (Debian's source ships none).
const CONFIGURE_ARGS: &[&str] = &[
    "--target-list=x86_64-softmmu",
    "--without-default-features",
    "--without-default-devices",
    "--with-devices-x86_64=baremq-fusion",
    "--enable-tcg",
    "--enable-kvm",
    // TCG plugins: `cargo xtask ipio --device fusion` counts instructions per I/O with one.
    "--enable-plugins",
    "--disable-docs",
    "--disable-tools",
    "--disable-guest-agent",
    "--disable-user",
    "--disable-install-blobs",
    "--disable-werror",
    "--meson=meson",
    "--firmwarepath=/usr/share/qemu:/usr/share/seabios:/usr/lib/ipxe/qemu",
];

/// Debian packages the build needs (besides gcc, make and python3).
pub(crate) const BUILD_PACKAGES: &[&str] = &[
    "ninja-build",
    "meson",
    "pkg-config",
    "libglib2.0-dev",
    "libpixman-1-dev",
    // Debian's QEMU source has no dtc copy: x86_64-softmmu needs the system's libfdt.
    "libfdt-dev",
    "zlib1g-dev",
    "flex",
    "bison",
    "patch",
    "xz-utils",
];

/// `cargo xtask qemu-fusion`: builds (or finds in the cache) the binary and prints its path
/// as the last line.
pub fn cmd_qemu_fusion(args: &[String]) -> Result<bool, String> {
    if let Some(a) = args.first() {
        return Err(format!("qemu-fusion: unknown option '{a}'"));
    }
    let bin = ensure_binary()?;
    println!("{}", bin.display());
    Ok(true)
}

/// [`ensure_binary`] once per xtask run: concurrent scenario workers wait for one build.
pub fn shared_binary() -> Result<PathBuf, String> {
    static BINARY: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    BINARY.get_or_init(ensure_binary).clone()
}

/// FNV-1a, 64 bits: a stable hash for the cache key (std's hasher may change between releases).
fn fnv1a(data: &[u8], mut h: u64) -> u64 {
    for b in data {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn cache_root() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir).join("baremq/qemu-fusion"));
    }
    std::env::var_os("HOME")
        .filter(|d| !d.is_empty())
        .map(|h| PathBuf::from(h).join(".cache/baremq/qemu-fusion"))
        .ok_or_else(|| "qemu-fusion: neither XDG_CACHE_HOME nor HOME is set".to_string())
}

/// The Debian source version of the installed `qemu-system-x86` (e.g. `1:7.2+dfsg-7+deb12u18`).
fn source_version() -> Result<String, String> {
    let out = Command::new("dpkg-query")
        .args(["-W", "-f", "${source:Version}", "qemu-system-x86"])
        .output()
        .map_err(|e| format!("qemu-fusion: cannot run dpkg-query: {e}"))?;
    let v = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || v.is_empty() {
        return Err("qemu-fusion: qemu-system-x86 is not installed (its source release is the one built)".into());
    }
    if !v.contains("7.2") {
        return Err(format!(
            "qemu-fusion: the device is written for QEMU 7.2; the installed qemu-system-x86 comes from {v}"
        ));
    }
    Ok(v)
}

/// The build tree of the current source and recipe, and the binary of the current device
/// source in it: `<cache>/<recipe hash>/` holds the configured tree (kept, so a changed device
/// file recompiles only itself) and `bin-<device hash>/qemu-system-x86_64`.
fn cache_paths(version: &str, device: &[u8]) -> Result<(PathBuf, PathBuf), String> {
    let mut recipe = 0xcbf2_9ce4_8422_2325u64;
    recipe = fnv1a(version.as_bytes(), recipe);
    recipe = fnv1a(KCONFIG_BLOCK.as_bytes(), recipe);
    recipe = fnv1a(MESON_LINE.as_bytes(), recipe);
    recipe = fnv1a(DEVICE_CONFIG.as_bytes(), recipe);
    for a in CONFIGURE_ARGS {
        recipe = fnv1a(a.as_bytes(), recipe);
    }
    let dir = cache_root()?.join(format!("{recipe:016x}"));
    let dev = fnv1a(device, recipe);
    let bin = dir.join(format!("bin-{dev:016x}")).join("qemu-system-x86_64");
    Ok((dir, bin))
}

/// The binary with the emulated Fusion controller, built first when the cache lacks it.
pub fn ensure_binary() -> Result<PathBuf, String> {
    let device = read_device()?;
    let version = source_version()?;
    let (dir, bin) = cache_paths(&version, &device_key(&device))?;
    if bin.is_file() {
        return Ok(bin);
    }
    // One build per tree at a time, across processes (e.g. `qemu-fusion` beside `qemu-test`);
    // the kernel drops the lock if a builder dies.
    std::fs::create_dir_all(&dir).map_err(|e| format!("qemu-fusion: {}: {e}", dir.display()))?;
    let lock_path = dir.join("build.lock");
    let lock = std::fs::File::create(&lock_path).map_err(|e| format!("qemu-fusion: {}: {e}", lock_path.display()))?;
    if lock.try_lock().is_err() {
        println!("xtask: another process is building {}; waiting for it", dir.display());
        lock.lock()
            .map_err(|e| format!("qemu-fusion: locking {}: {e}", lock_path.display()))?;
    }
    if bin.is_file() {
        return Ok(bin);
    }
    let start = std::time::Instant::now();
    let tree = dir.join("qemu");
    let build = tree.join("build");
    if !build.join("build.ninja").is_file() {
        println!(
            "xtask: building QEMU {version} with megasas-fusion in {} (once; later device changes rebuild only the device)",
            dir.display()
        );
        ensure_build_packages()?;
        unpack_source(&version, &dir, &tree)?;
        add_device(&tree, &device)?;
        std::fs::create_dir_all(&build).map_err(|e| format!("qemu-fusion: {}: {e}", build.display()))?;
        run_in(Command::new(tree.join("configure")).args(CONFIGURE_ARGS), &build)?;
    } else {
        add_device(&tree, &device)?;
    }
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
    run_in(
        Command::new("ninja").args(["-j", &jobs.to_string(), "qemu-system-x86_64"]),
        &build,
    )?;
    let bin_dir = bin.parent().expect("binary path has a directory");
    std::fs::create_dir_all(bin_dir).map_err(|e| format!("qemu-fusion: {}: {e}", bin_dir.display()))?;
    // Copied out of the build tree: next to `qemu-bundle/` QEMU would look for firmware
    // there instead of the distribution's directories.
    let staged = bin_dir.join("qemu-system-x86_64.partial");
    std::fs::copy(build.join("qemu-system-x86_64"), &staged)
        .and_then(|_| std::fs::rename(&staged, &bin))
        .map_err(|e| format!("qemu-fusion: copying the binary to {}: {e}", bin.display()))?;
    println!(
        "xtask: built {} in {:.0} s",
        bin.display(),
        start.elapsed().as_secs_f64()
    );
    Ok(bin)
}

fn run_in(cmd: &mut Command, dir: &Path) -> Result<(), String> {
    cmd.current_dir(dir);
    let shown = format!("{cmd:?}").replace('"', "");
    println!("xtask: $ (cd {}) {shown}", dir.display());
    let status = cmd.status().map_err(|e| format!("cannot run {shown}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("qemu-fusion: command failed ({status}): {shown}"))
    }
}

fn ensure_build_packages() -> Result<(), String> {
    let missing: Vec<&str> = BUILD_PACKAGES
        .iter()
        .copied()
        .filter(|p| !crate::setup::package_installed(p))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let cmd = format!("apt-get install -y --no-install-recommends {}", missing.join(" "));
    if !crate::setup::is_root() {
        return Err(format!("qemu-fusion: build packages missing; run as root: {cmd}"));
    }
    println!("xtask: installing the QEMU build packages: {cmd}");
    crate::setup::apt_get_install(&missing, crate::setup::Recommends::Skip)
}

/// The deb-src lines: the suites of the machine's Debian mirror (bookworm, its updates and
/// its security suite, where stable QEMU updates are published).
fn source_list(codename: &str) -> String {
    format!(
        "deb-src http://deb.debian.org/debian {codename} main\n\
         deb-src http://deb.debian.org/debian {codename}-updates main\n\
         deb-src http://deb.debian.org/debian-security {codename}-security main\n"
    )
}

/// Downloads (into the cache's shared `src/`, with a private apt list so the machine's apt
/// configuration is untouched) and unpacks the source with Debian's patches applied.
fn unpack_source(version: &str, dir: &Path, tree: &Path) -> Result<(), String> {
    let root = dir.parent().expect("cache dir has a parent");
    let src = root.join("src");
    let apt = root.join("apt");
    for d in [src.clone(), apt.join("lists/partial"), apt.join("parts")] {
        std::fs::create_dir_all(&d).map_err(|e| format!("qemu-fusion: {}: {e}", d.display()))?;
    }
    let upstream = version.split(':').next_back().unwrap_or(version);
    let upstream_base = upstream.split('-').next().unwrap_or(upstream);
    let orig = src.join(format!("qemu_{upstream_base}.orig.tar.xz"));
    let debian = src.join(format!("qemu_{upstream}.debian.tar.xz"));
    if !orig.is_file() || !debian.is_file() {
        let list = apt.join("sources.list");
        std::fs::write(&list, source_list(&crate::setup::debian_codename()))
            .map_err(|e| format!("qemu-fusion: {}: {e}", list.display()))?;
        let opts = [
            format!("Dir::Etc::SourceList={}", list.display()),
            format!("Dir::Etc::SourceParts={}", apt.join("parts").display()),
            format!("Dir::State::Lists={}", apt.join("lists").display()),
        ];
        let with_opts = |cmd: &mut Command| {
            for o in &opts {
                cmd.args(["-o", o]);
            }
        };
        let mut update = Command::new("apt-get");
        with_opts(&mut update);
        run_in(update.arg("update"), &src)?;
        let mut source = Command::new("apt-get");
        with_opts(&mut source);
        run_in(
            source.args(["source", "--download-only", &format!("qemu={version}")]),
            &src,
        )?;
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("qemu-fusion: {}: {e}", dir.display()))?;
    let _ = std::fs::remove_dir_all(tree);
    let staging = dir.join("unpack");
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir_all(&staging).map_err(|e| format!("qemu-fusion: {}: {e}", staging.display()))?;
    run_in(Command::new("tar").arg("xJf").arg(&orig), &staging)?;
    let top = std::fs::read_dir(&staging)
        .map_err(|e| format!("qemu-fusion: {}: {e}", staging.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.is_dir())
        .ok_or("qemu-fusion: the source tarball holds no directory")?;
    std::fs::rename(&top, tree).map_err(|e| format!("qemu-fusion: {}: {e}", tree.display()))?;
    let _ = std::fs::remove_dir_all(&staging);
    run_in(Command::new("tar").arg("xJf").arg(&debian), tree)?;
    let series = std::fs::read_to_string(tree.join("debian/patches/series"))
        .map_err(|e| format!("qemu-fusion: debian/patches/series: {e}"))?;
    for patch in series
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let file = tree.join("debian/patches").join(patch);
        let f = std::fs::File::open(&file).map_err(|e| format!("qemu-fusion: {}: {e}", file.display()))?;
        run_in(Command::new("patch").args(["-p1", "-s"]).stdin(f), tree)?;
    }
    Ok(())
}

/// The device's files, each as (name, bytes), in [`DEVICE_FILES`] order.
type DeviceFiles = Vec<(&'static str, Vec<u8>)>;

fn read_device() -> Result<DeviceFiles, String> {
    DEVICE_FILES
        .iter()
        .map(|name| {
            let path = crate::root().join(DEVICE_DIR).join(name);
            std::fs::read(&path)
                .map(|bytes| (*name, bytes))
                .map_err(|e| format!("qemu-fusion: reading {}: {e}", path.display()))
        })
        .collect()
}

/// The bytes the cache key hashes: every file's name and contents.
fn device_key(device: &DeviceFiles) -> Vec<u8> {
    let mut key = Vec::new();
    for (name, bytes) in device {
        key.extend_from_slice(name.as_bytes());
        key.push(0);
        key.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        key.extend_from_slice(bytes);
    }
    key
}

/// Adds the device to the unpacked tree: its files, one Kconfig symbol, one meson line and the
/// device configuration of the minimal build.
fn add_device(tree: &Path, device: &DeviceFiles) -> Result<(), String> {
    let write = |rel: &str, data: &[u8]| {
        std::fs::write(tree.join(rel), data).map_err(|e| format!("qemu-fusion: writing {rel}: {e}"))
    };
    let append = |rel: &str, text: &str| -> Result<(), String> {
        let path = tree.join(rel);
        let mut old = std::fs::read_to_string(&path).map_err(|e| format!("qemu-fusion: reading {rel}: {e}"))?;
        if !old.contains(text.trim()) {
            old.push_str(text);
        }
        std::fs::write(&path, old).map_err(|e| format!("qemu-fusion: writing {rel}: {e}"))
    };
    for (name, bytes) in device {
        write(&format!("hw/scsi/{name}"), bytes)?;
    }
    append("hw/scsi/Kconfig", KCONFIG_BLOCK)?;
    append("hw/scsi/meson.build", MESON_LINE)?;
    write(
        "configs/devices/x86_64-softmmu/baremq-fusion.mak",
        DEVICE_CONFIG.as_bytes(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_the_published_vectors() {
        assert_eq!(fnv1a(b"", 0xcbf2_9ce4_8422_2325), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a", 0xcbf2_9ce4_8422_2325), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar", 0xcbf2_9ce4_8422_2325), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn the_cache_key_follows_the_device_source_and_the_release() {
        let (tree_a, a) = cache_paths("1:7.2+dfsg-7", b"one").unwrap();
        let (tree_b, b) = cache_paths("1:7.2+dfsg-7", b"two").unwrap();
        let (tree_c, c) = cache_paths("1:7.2+dfsg-8", b"one").unwrap();
        assert_ne!(a, b);
        assert_eq!(tree_a, tree_b, "a device change reuses the configured tree");
        assert_ne!(a, c);
        assert_ne!(tree_a, tree_c, "another source release gets its own tree");
        assert_eq!(a, cache_paths("1:7.2+dfsg-7", b"one").unwrap().1);
    }

    /// Every part is in the repository and the translation unit includes each of them once, so
    /// the build sees all of it and the cache key covers all of it.
    #[test]
    fn the_device_files_are_one_translation_unit() {
        let device = read_device().unwrap();
        assert_eq!(device.len(), DEVICE_FILES.len());
        let unit = String::from_utf8_lossy(&device[0].1).to_string();
        for (name, _) in &device[1..] {
            assert_eq!(unit.matches(&format!("#include \"{name}\"")).count(), 1, "{name}");
        }
        let mut changed = device.clone();
        changed[2].1.push(b' ');
        assert_ne!(device_key(&device), device_key(&changed));
    }

    #[test]
    fn the_device_config_enables_the_fusion_controller() {
        assert!(DEVICE_CONFIG.lines().any(|l| l == "CONFIG_MEGASAS_FUSION=y"));
        assert!(KCONFIG_BLOCK.contains("config MEGASAS_FUSION"));
        assert!(MESON_LINE.contains(DEVICE_FILE));
    }
}
