//! Limits a jobspec is held to before anything runs: how deep it may nest
//! (checked before the HCL parser, which recurses once per level and would
//! overflow the stack on a few thousand levels), and how much argv and
//! environment one task may hand to `execve` (the kernel's ARG_MAX: the job
//! model's, re-exported here).

pub use crate::job::exec_limits::*;

/// Deeper than any real job needs, far shallower than the parser's stack.
pub const MAX_NESTING: usize = 32;

/// The byte offset of the first bracket nested deeper than [`MAX_NESTING`]:
/// `{ [ (`, a string, and a template interpolation `${ }` / `%{ }` inside a
/// string each open a level. Comments and heredocs open none.
pub fn too_deep(src: &str) -> Option<usize> {
    #[derive(Clone, Copy, PartialEq)]
    enum Frame {
        Code,
        Str,
    }
    let bytes = src.as_bytes();
    let mut stack: Vec<Frame> = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let at = |s: &str| bytes[i..].starts_with(s.as_bytes());
        let in_string = stack.last() == Some(&Frame::Str);
        let opened = if in_string {
            match c {
                b'\\' => {
                    i += 2;
                    continue;
                }
                b'"' => {
                    stack.pop();
                    None
                }
                b'$' | b'%' if bytes.get(i + 1) == Some(&b'{') => {
                    i += 1;
                    Some(Frame::Code)
                }
                _ => None,
            }
        } else if c == b'#' || at("//") {
            i = src[i..].find('\n').map_or(bytes.len(), |n| i + n);
            continue;
        } else if at("/*") {
            i = src[i + 2..]
                .find("*/")
                .map_or(bytes.len(), |n| i + 2 + n + 2);
            continue;
        } else if at("<<") {
            i = skip_heredoc(src, i);
            continue;
        } else {
            match c {
                b'"' => Some(Frame::Str),
                b'{' | b'[' | b'(' => Some(Frame::Code),
                b'}' | b']' | b')' => {
                    stack.pop();
                    None
                }
                _ => None,
            }
        };
        if let Some(frame) = opened {
            stack.push(frame);
            if stack.len() > MAX_NESTING {
                return Some(i);
            }
        }
        i += 1;
    }
    None
}

/// Past a heredoc `<<ID` or `<<-ID` that starts at `start`: its body runs to
/// a line holding only `ID`. Not a heredoc: just past the `<<`.
fn skip_heredoc(src: &str, start: usize) -> usize {
    let rest = &src[start + 2..];
    let rest = rest.strip_prefix('-').unwrap_or(rest);
    let id: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    if id.is_empty() {
        return start + 2;
    }
    let Some(body) = src[start..].find('\n').map(|n| start + n + 1) else {
        return src.len();
    };
    let mut pos = body;
    for line in src[body..].split_inclusive('\n') {
        pos += line.len();
        if line.trim() == id {
            return pos;
        }
    }
    src.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_counts_brackets_strings_and_interpolations() {
        let ok = "job \"a\" { group \"g\" { x = [1, (2)] } }";
        assert_eq!(too_deep(ok), None);
        let deep = format!(
            "a = {}{}",
            "[".repeat(MAX_NESTING + 1),
            "]".repeat(MAX_NESTING + 1)
        );
        assert_eq!(too_deep(&deep), Some(4 + MAX_NESTING));
        let just = format!("a = {}{}", "[".repeat(MAX_NESTING), "]".repeat(MAX_NESTING));
        assert_eq!(too_deep(&just), None);
        // A template nests too: "${ "${ ... }" }".
        let templates = "a = \"${\"".repeat(MAX_NESTING);
        assert!(too_deep(&templates).is_some());
    }

    #[test]
    fn comments_strings_and_heredocs_open_nothing() {
        let src = format!(
            "# {{{{{{\n// [[[[\n/* (((( */\na = \"{{{{{{ \\\" [[[\"\nb = <<EOF\n{}\nEOF\nc = {{}}\n",
            "{".repeat(100)
        );
        assert_eq!(too_deep(&src), None);
    }

    #[test]
    fn a_hundred_thousand_levels_are_refused_not_overflowed() {
        let src = "job \"j\" {".repeat(100_000);
        assert!(too_deep(&src).is_some());
        let src = "[".repeat(100_000);
        assert_eq!(too_deep(&src), Some(MAX_NESTING));
    }
}
