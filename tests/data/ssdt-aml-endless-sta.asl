/*
 * tests/data/ssdt-aml-endless-sta.bin (scenario aml-endless-sta): a host
 * bridge whose _STA never returns. Built with
 * `iasl -p ssdt-aml-endless-sta tests/data/ssdt-aml-endless-sta.asl`, then renamed .aml -> .bin.
 */
DefinitionBlock ("", "SSDT", 2, "BAREMQ", "ENDLESS", 1)
{
    Scope (\_SB)
    {
        Device (HBX0)
        {
            Name (_HID, EisaId ("PNP0A08"))
            Method (_STA, 0, NotSerialized)
            {
                Local0 = Zero
                While (One)
                {
                    Local0++
                }
                Return (0x0F)
            }
        }
    }
}
