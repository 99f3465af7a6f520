//! The executor: starts one task process under isolation and supervises it.
pub mod spec;
pub use spec::*;
