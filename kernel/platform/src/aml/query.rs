//! What the kernel asks of the interpreter: a named object or method
//! (`_STA`, `_CRS`, `_PRT`, `_BBN`, `_PXM`, ...) evaluated from the top, a
//! device's ids, and whether a device is a PCI host bridge.

use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use super::exec::Frame;
use super::interp::{Interpreter, aml_error, stack_position};
use super::name::{Path, eisa_id_text};
use super::object::{Object, ScopeKind};
use crate::error::Result;

impl<'h> Interpreter<'h> {
    /// Evaluates `path`: calls it when it is a method, reads it otherwise.
    pub fn evaluate(&mut self, path: &Path, args: Vec<Object>) -> Result<Object> {
        self.steps = 0;
        self.depth = 0;
        self.stack_base = stack_position();
        let path = self.follow_alias(path.clone());
        let value = match self.nodes.get(&path) {
            None => return Err(aml_error(&path, 0, "no such object", 0)),
            Some(Object::Method { .. } | Object::OsiMethod) => self.call(&path, args)?,
            Some(_) => self.read_named(&path)?,
        };
        self.resolve_value(value)
    }

    /// Evaluates `path` to an integer, `Ok(None)` when it does not exist.
    pub fn evaluate_integer(&mut self, path: &Path) -> Result<Option<u64>> {
        if !self.exists(path) {
            return Ok(None);
        }
        let value = self.evaluate(path, Vec::new())?;
        self.integer_of(&value, path, 0).map(Some)
    }

    /// Turns references into the values they name (results handed out).
    fn resolve_value(&mut self, value: Object) -> Result<Object> {
        match value {
            Object::Reference(place) => {
                let mut frame = Frame::new(Path::root(), Vec::new(), false);
                self.read_place(&mut frame, &place)
            }
            other => Ok(other),
        }
    }

    /// Evaluates an integer object inside another evaluation (steps and depth kept).
    pub(super) fn quiet_integer(&mut self, path: &Path) -> Option<u64> {
        if !self.exists(path) {
            return None;
        }
        let saved_depth = self.depth;
        let value = match self.nodes.get(path) {
            Some(Object::Method { .. }) => self.call(path, Vec::new()),
            _ => self.read_named(path),
        };
        self.depth = saved_depth;
        let value = value.ok()?;
        self.integer_of(&value, path, 0).ok()
    }

    /// Whether `device`'s `_HID` or `_CID` names a PCI host bridge (PNP0A03, PNP0A08).
    pub fn is_host_bridge(&mut self, device: &Path) -> bool {
        if !matches!(self.nodes.get(device), Some(Object::Scope(ScopeKind::Device))) {
            return false;
        }
        self.ids(device).iter().any(|id| id == "PNP0A03" || id == "PNP0A08")
    }

    /// `_HID` then `_CID` ids of a device, as text (errors give none).
    pub fn ids(&mut self, device: &Path) -> Vec<String> {
        let mut out = Vec::new();
        for name in [*b"_HID", *b"_CID"] {
            let path = device.child(name);
            // Plain names are read without starting a new evaluation (this
            // also runs inside one, for PCI_Config regions).
            let value = match self.nodes.get(&path) {
                None => continue,
                Some(Object::Method { .. }) => {
                    let saved_depth = self.depth;
                    let value = self.call(&path, Vec::new());
                    self.depth = saved_depth;
                    match value {
                        Ok(v) => v,
                        Err(_) => continue,
                    }
                }
                Some(other) => other.clone(),
            };
            let items = match value {
                Object::Package(items) => items,
                other => vec![other],
            };
            for item in items {
                match item {
                    Object::Integer(v) => out.push(eisa_id_text(v)),
                    Object::String(s) => out.push(s),
                    _ => {}
                }
            }
        }
        out
    }
}
