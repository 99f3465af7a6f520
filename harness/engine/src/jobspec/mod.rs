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
//! - `duration`: Nomad's duration strings.

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
    if let Some(at) = limits::too_deep(source) {
        return Err(cx.error(
            Some(at..at + 1),
            format!(
                "nested more than {} levels deep (blocks, lists, strings and templates count)",
                limits::MAX_NESTING
            ),
        ));
    }
    let body = hcl::edit::parser::parse_body(source).map_err(|e| JobspecError::Invalid {
        file: file_name.to_owned(),
        line: e.location().line(),
        col: e.location().column(),
        message: format!("syntax error: {}", e.message()),
    })?;
    cx.job(&body)
}

pub fn parse_file(path: &Path) -> Result<Job, JobspecError> {
    let source = std::fs::read_to_string(path).map_err(|source| JobspecError::Io {
        path: path.to_owned(),
        source,
    })?;
    parse(&source, &path.display().to_string())
}
