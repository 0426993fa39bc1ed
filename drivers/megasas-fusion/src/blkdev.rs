//! Block-layer binding (after the blk IssueToken merge).
