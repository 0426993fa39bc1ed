/*
 * Fixture for kernel/platform/tests/aml.rs. Rebuild namespace.aml with
 * `iasl -p namespace namespace.asl` (acpica-tools) after changing this file.
 * Hardware reads (SystemIO fields) return what the test's FixedRegions says.
 */
DefinitionBlock ("", "DSDT", 2, "BAREMQ", "AMLTEST", 1)
{
    Name (PICM, Zero)
    Method (_PIC, 1, NotSerialized)
    {
        PICM = Arg0
    }

    OperationRegion (PIRQ, SystemIO, 0x0500, 0x10)
    Field (PIRQ, ByteAcc, NoLock, Preserve)
    {
        PRQA, 8,
        PRQB, 8,
        Offset (0x04),
        BUSR, 32
    }

    Scope (_SB)
    {
        Device (LNKA)
        {
            Name (_HID, EisaId ("PNP0C0F"))
            Name (_UID, One)
            Method (_CRS, 0, Serialized)
            {
                Name (RTL, ResourceTemplate ()
                {
                    Interrupt (ResourceConsumer, Level, ActiveLow, Shared, ,, ) {0}
                })
                CreateDWordField (RTL, 0x05, IRQN)
                IRQN = PRQA
                Return (RTL)
            }
        }

        Device (PCI0)
        {
            Name (_HID, EisaId ("PNP0A08"))
            Name (_CID, EisaId ("PNP0A03"))
            Name (_UID, Zero)
            Name (_SEG, Zero)
            Method (_BBN, 0, NotSerialized)
            {
                Return (Zero)
            }

            Name (_PXM, One)
            Name (CRS0, ResourceTemplate ()
            {
                WordBusNumber (ResourceProducer, MinFixed, MaxFixed, PosDecode,
                    0x0000, 0x0000, 0x003F, 0x0000, 0x0040,,,)
                IO (Decode16, 0x0CF8, 0x0CF8, 0x01, 0x08, )
                DWordMemory (ResourceProducer, PosDecode, MinFixed, MaxFixed, NonCacheable, ReadWrite,
                    0x00000000, 0xC0000000, 0xFEBFFFFF, 0x00000000, 0x3EC00000,,,, AddressRangeMemory, TypeStatic)
                QWordMemory (ResourceProducer, PosDecode, MinFixed, MaxFixed, Cacheable, ReadWrite,
                    0x0000000000000000, 0x0000008000000000, 0x0000008FFFFFFFFF, 0x0000000000000000, 0x0000001000000000,,,, AddressRangeMemory, TypeStatic)
            })
            Method (_CRS, 0, NotSerialized)
            {
                Return (CRS0)
            }

            Name (PRTA, Package ()
            {
                Package () { 0x0002FFFF, Zero, Zero, 0x10 },
                Package () { 0x0002FFFF, One, Zero, 0x11 },
                Package () { 0x0003FFFF, Zero, LNKA, Zero },
                Package () { 0x0003FFFF, One, LNKB, Zero }
            })
            Name (PRTP, Package ()
            {
                Package () { 0x0002FFFF, Zero, LNKA, Zero }
            })
            Method (_PRT, 0, NotSerialized)
            {
                If (PICM)
                {
                    Return (PRTA)
                }

                Return (PRTP)
            }

            Device (RP01)
            {
                Name (_ADR, 0x001C0002)
                Name (_PXM, 0x02)
                /* Built at run time: While, Index stores, arithmetic. */
                Method (_PRT, 0, Serialized)
                {
                    Local1 = Package (0x04) {}
                    Local2 = Zero
                    While ((Local2 < 0x04))
                    {
                        Local3 = Package (0x04) { 0xFFFF, Zero, Zero, Zero }
                        Local3 [One] = Local2
                        Local3 [0x03] = (0x28 + Local2)
                        Local1 [Local2] = Local3
                        Local2++
                    }

                    Return (Local1)
                }

                /* A device behind the root port: its PCI_Config region is on RP01's secondary bus. */
                Device (DEV0)
                {
                    Name (_ADR, 0x00030001)
                    OperationRegion (CFG0, PCI_Config, Zero, 0x0100)
                    Field (CFG0, DWordAcc, NoLock, Preserve)
                    {
                        VDID, 32
                    }
                    Method (VEND, 0, NotSerialized)
                    {
                        Return (VDID)
                    }
                }
            }
        }

        Device (PCI1)
        {
            Name (_HID, "PNP0A03")
            Name (_SEG, One)
            Method (_STA, 0, NotSerialized)
            {
                Return (0x0F)
            }

            /* Read from a register: the root bus the chipset was set to. */
            Method (_BBN, 0, NotSerialized)
            {
                Return ((BUSR & 0xFF))
            }

            Method (_CRS, 0, Serialized)
            {
                Name (BUF, ResourceTemplate ()
                {
                    WordBusNumber (ResourceProducer, MinFixed, MaxFixed, PosDecode,
                        0x0000, 0x0000, 0x0000, 0x0000, 0x0000,,, BUS)
                })
                CreateWordField (BUF, \_SB.PCI1._CRS.BUS._MIN, BMIN)
                CreateWordField (BUF, \_SB.PCI1._CRS.BUS._MAX, BMAX)
                CreateWordField (BUF, \_SB.PCI1._CRS.BUS._LEN, BLEN)
                BMIN = _BBN ()
                BMAX = (BMIN + 0x0F)
                BLEN = 0x10
                Return (BUF)
            }
        }

        Device (PCI2)
        {
            Name (_HID, EisaId ("PNP0A08"))
            Method (_STA, 0, NotSerialized)
            {
                Return (Zero)
            }
        }

        /* Defined after PCI0's packages name it: a forward reference. */
        Device (LNKB)
        {
            Name (_HID, EisaId ("PNP0C0F"))
            Name (_UID, 2)
            Method (_CRS, 0, Serialized)
            {
                Name (BUF, ResourceTemplate ()
                {
                    IRQ (Level, ActiveLow, Shared, ) {}
                })
                CreateWordField (BUF, One, MASK)
                MASK = (One << PRQB)
                Return (BUF)
            }
        }

        Method (SPIN, 0, NotSerialized)
        {
            While (One)
            {
            }
        }

        Method (DEEP, 1, NotSerialized)
        {
            Return (DEEP ((Arg0 + One)))
        }

        Method (MTCH, 0, NotSerialized)
        {
            Return (Match (Package () { One, 0x05, 0x09 }, MEQ, 0x09, MTR, Zero, Zero))
        }

        Method (CCAT, 0, NotSerialized)
        {
            Return (Concatenate ("ab", "cd"))
        }

        Method (OSIW, 0, NotSerialized)
        {
            If (_OSI ("Windows 2015"))
            {
                If (_OSI ("Linux"))
                {
                    Return (0x02)
                }

                Return (One)
            }

            Return (Zero)
        }

        Method (DIVM, 0, NotSerialized)
        {
            Divide (0x64, 0x07, Local0, Local1)
            Return (((Local1 * 0x0100) + Local0))
        }
    }
}
