//! The kernel's error type: every failure that reaches a report or the final
//! FAILURE line, wrapping the library crates' errors.

use core::fmt;

#[derive(Debug)]
pub enum Error {
    /// ACPI, PCI, MSI/MSI-X or IRQ-routing logic.
    Platform(platform::Error),
    /// A device memory mapping.
    Map(crate::arch::paging::MapError),
    /// Physical memory.
    Alloc(crate::arch::memory::AllocError),
    /// PCI was used before enumeration.
    NoPci,
    /// A CPU index that is not online.
    CpuOffline { cpu: usize, online: usize },
    /// A device that is absent or misbehaves, with a specific description.
    Device(alloc::string::String),
    /// A bad command-line key or value, with a specific description.
    Config(alloc::string::String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Platform(e) => write!(f, "{e}"),
            Error::Map(e) => write!(f, "{e}"),
            Error::Alloc(e) => write!(f, "{e}"),
            Error::NoPci => write!(f, "PCI has not been enumerated"),
            Error::CpuOffline { cpu, online } => write!(f, "cpu{cpu} is not online ({online} CPUs online)"),
            Error::Device(s) => write!(f, "{s}"),
            Error::Config(s) => write!(f, "command line: {s}"),
        }
    }
}

impl From<platform::Error> for Error {
    fn from(e: platform::Error) -> Self {
        Error::Platform(e)
    }
}

impl From<crate::arch::paging::MapError> for Error {
    fn from(e: crate::arch::paging::MapError) -> Self {
        Error::Map(e)
    }
}

impl From<crate::arch::memory::AllocError> for Error {
    fn from(e: crate::arch::memory::AllocError) -> Self {
        Error::Alloc(e)
    }
}
