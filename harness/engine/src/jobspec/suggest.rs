//! Error wording: what an expression is, and which known name a typo meant.

use hcl::edit::expr::Expression;

/// Describes an expression's type for "must be X, got Y" messages.
pub fn kind(expr: &Expression) -> &'static str {
    match expr {
        Expression::Null(_) => "null",
        Expression::Bool(_) => "a boolean",
        Expression::Number(_) => "a number",
        Expression::String(_) => "a string",
        Expression::Array(_) => "a list",
        Expression::Object(_) => "an object",
        Expression::StringTemplate(_) | Expression::HeredocTemplate(_) => {
            "a template (interpolation is not supported)"
        }
        Expression::Variable(_) => "a bare identifier (missing quotes?)",
        _ => "an expression",
    }
}

pub fn unknown(what: &str, name: &str, within: &str, expected: &[&str]) -> String {
    let mut message = format!("unknown {what} `{name}` in {within}");
    if let Some(suggestion) = closest(name, expected) {
        message.push_str(&format!("; did you mean `{suggestion}`?"));
    } else if expected.is_empty() {
        message.push_str(&format!("; no {what}s are allowed here"));
    } else {
        message.push_str(&format!(" (expected one of: {})", expected.join(", ")));
    }
    message
}

/// Typo suggestion: the nearest candidate within two edits, or one the name
/// abbreviates (`mem` for `memory`).
pub fn closest<'a>(name: &str, candidates: &[&'a str]) -> Option<&'a str> {
    candidates
        .iter()
        .map(|c| (edit_distance(name, c), *c))
        .filter(|(d, c)| (*d <= 2 && *d < name.len()) || (name.len() >= 3 && c.starts_with(name)))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if ca == *cb {
                diagonal
            } else {
                1 + diagonal.min(above).min(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}
