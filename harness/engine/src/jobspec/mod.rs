//! A Nomad-style HCL jobspec subset: one `job` with groups of `exec` tasks.
//!
//! Parsing goes through `hcl::edit` rather than `hcl::from_str` because the
//! edit parser keeps byte spans on every block, attribute and expression, so
//! each semantic error can point at `file:line:col` like a syntax error does.
//!
//! - [`parse`]: the entry points and the error type;
//! - `syntax`: the walk over the HCL body ([`Cx`]);
//! - `schema`: what each block may hold;
//! - `suggest`: "did you mean" hints and type names;
//! - [`limits`]: nesting, ARG_MAX and what `execve` can take;
//! - `duration`: Nomad's duration strings;
//! - [`hcl`]: the walk's pieces, for other HCL files built on jobspecs
//!   (the harness's scenario files).

mod duration;
pub mod limits;
mod schema;
mod suggest;
mod syntax;
#[cfg(test)]
mod tests;

pub use crate::job::*;
pub use duration::parse_duration;

use std::path::{Path, PathBuf};
use syntax::Cx;

/// What another HCL format needs to read like a jobspec: positions from
/// spans, schema checks with "did you mean", and the `job` block itself.
pub mod hcl {
    pub use super::schema::Schema;
    pub use super::suggest::{closest, kind, unknown};
    pub use super::syntax::Cx;
    pub use ::hcl::edit;

    /// The HCL body of `cx`'s source, or its syntax error at `file:line:col`
    /// (too deep a nesting counts as one).
    pub fn parse_body(cx: &Cx) -> super::Result<edit::structure::Body> {
        if let Some(at) = super::limits::too_deep(cx.src) {
            return Err(cx.error(
                Some(at..at + 1),
                format!(
                    "nested more than {} levels deep (blocks, lists, strings and templates count)",
                    super::limits::MAX_NESTING
                ),
            ));
        }
        edit::parser::parse_body(cx.src).map_err(|e| super::JobspecError::Invalid {
            file: cx.file.to_owned(),
            line: e.location().line(),
            col: e.location().column(),
            message: format!("syntax error: {}", e.message()),
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum JobspecError {
    /// A syntax or validation error at a 1-based position in the source.
    #[error("{file}:{line}:{col}: {message}")]
    Invalid {
        file: String,
        line: usize,
        col: usize,
        message: String,
    },
    #[error("cannot read job file {}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

type Result<T, E = JobspecError> = std::result::Result<T, E>;

/// Parses and validates a jobspec; `file_name` only labels error messages.
pub fn parse(source: &str, file_name: &str) -> Result<Job, JobspecError> {
    let cx = Cx {
        src: source,
        file: file_name,
    };
    let body = hcl::parse_body(&cx)?;
    cx.job(&body)
}

pub fn parse_file(path: &Path) -> Result<Job, JobspecError> {
    let source = std::fs::read_to_string(path).map_err(|source| JobspecError::Io {
        path: path.to_owned(),
        source,
    })?;
    parse(&source, &path.display().to_string())
}
