//! The namespace: defining names, and ACPI's name search (a bare segment
//! upward from the scope, aliases followed).

use alloc::vec::Vec;

use super::interp::Interpreter;
use super::name::{NameString, Path};
use super::object::{Object, ScopeKind};

impl<'h> Interpreter<'h> {
    /// Whether `path` names an object.
    pub fn exists(&self, path: &Path) -> bool {
        self.nodes.contains_key(path)
    }

    /// The object stored at `path` (no evaluation).
    pub fn object(&self, path: &Path) -> Option<&Object> {
        self.nodes.get(path)
    }

    /// Paths of every `Device`, in namespace order.
    pub fn devices(&self) -> Vec<Path> {
        self.nodes
            .iter()
            .filter(|(_, o)| matches!(o, Object::Scope(ScopeKind::Device)))
            .map(|(p, _)| p.clone())
            .collect()
    }

    pub(super) fn follow_alias(&self, mut path: Path) -> Path {
        for _ in 0..8 {
            match self.nodes.get(&path) {
                Some(Object::Alias(target)) => path = target.clone(),
                _ => break,
            }
        }
        path
    }

    /// ACPI name search: a bare segment is looked for in the scope, then
    /// each parent up to the root; other names are exact.
    pub fn resolve(&self, name: &NameString, scope: &Path) -> Option<Path> {
        if name.searches_upward() {
            let mut base = scope.clone();
            loop {
                let candidate = base.child(name.segs[0]);
                if self.nodes.contains_key(&candidate) {
                    return Some(self.follow_alias(candidate));
                }
                if base.0.is_empty() {
                    return None;
                }
                base = base.parent();
            }
        }
        let path = name.in_scope(scope);
        self.nodes.contains_key(&path).then(|| self.follow_alias(path))
    }

    pub(super) fn define(&mut self, path: Path, object: Object) {
        self.nodes.insert(path, object);
    }

    pub(super) fn define_scope(&mut self, path: &Path, kind: ScopeKind) {
        match self.nodes.get(path) {
            Some(Object::Scope(_)) if kind == ScopeKind::Scope => {}
            _ => {
                self.nodes.insert(path.clone(), Object::Scope(kind));
            }
        }
    }
}
