//! Escaping, and the few pieces of markup every page shares. Everything a
//! page shows from a run (task names, log lines, details, tokens) goes
//! through [`esc`]: a task may be named, or log, anything.

use std::fmt::Write;

/// `text` safe in HTML and SVG text and in quoted attribute values.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = include_str!("style.css");

/// The report's only script: a copy button copies the value of the input
/// it names; a timeline mark (or command line) pointed at shows its
/// history row's line and time as its tooltip, and clicked goes to the
/// row (one handler, not a link and a copy of the line on each of
/// hundreds of marks).
const SCRIPT: &str = r##"
const markOf = (event) => event.target.closest && event.target.closest("[data-i]");
for (const svg of document.querySelectorAll("svg.timeline")) {
  svg.addEventListener("click", (event) => {
    const mark = markOf(event);
    if (mark) { location.hash = "e" + mark.dataset.i; }
  });
  svg.addEventListener("mouseover", (event) => {
    const mark = markOf(event);
    const row = mark && document.getElementById("e" + mark.dataset.i);
    if (!row || mark.querySelector("title")) { return; }
    const title = document.createElementNS("http://www.w3.org/2000/svg", "title");
    const time = row.cells[1].textContent;
    title.textContent = "#" + mark.dataset.i + " " + row.cells[2].textContent + (time ? " (+" + time + " ms)" : "");
    mark.appendChild(title);
  });
}
for (const button of document.querySelectorAll("button[data-copy]")) {
  button.addEventListener("click", () => {
    const input = document.getElementById(button.dataset.copy);
    input.select();
    const done = () => { button.textContent = "copied"; };
    if (navigator.clipboard) {
      navigator.clipboard.writeText(input.value).then(done, () => { document.execCommand("copy"); done(); });
    } else {
      document.execCommand("copy");
      done();
    }
  });
}
"##;

/// The files every page of a report shares, written once beside its
/// `index.html`: the stylesheet and the one script. They are the
/// report's own, never fetched from anywhere.
pub const SHARED: [(&str, &str); 2] = [("report.css", STYLE), ("report.js", SCRIPT)];

/// A whole page: `body` is markup already escaped; `root` is the way
/// from the page to the report's directory (`""` or `"../"`).
pub fn page(title: &str, body: &str, root: &str) -> String {
    let mut out = String::new();
    // No request leaves the report: the icon is empty, the style and the
    // script the report's own files.
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <link rel=\"icon\" href=\"data:,\"><title>{}</title>\
         <link rel=\"stylesheet\" href=\"{root}{css}\"></head>\
         <body>\n{body}\n<script src=\"{root}{js}\"></script></body></html>\n",
        esc(title),
        css = SHARED[0].0,
        js = SHARED[1].0,
    );
    out
}

/// A read-only field holding `value`, and a button that copies it.
pub fn copy_field(id: &str, value: &str) -> String {
    format!(
        "<span class=\"copy\"><input id=\"{id}\" readonly size=\"{}\" value=\"{}\">\
         <button type=\"button\" data-copy=\"{id}\">copy</button></span>",
        value.chars().count().clamp(20, 90),
        esc(value)
    )
}

/// `text` as a `<pre>` block.
pub fn pre(text: &str) -> String {
    format!("<pre>{}</pre>", esc(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_characters_are_escaped() {
        assert_eq!(
            esc(r#"<script>alert("x" & 'y')</script>"#),
            "&lt;script&gt;alert(&quot;x&quot; &amp; &#39;y&#39;)&lt;/script&gt;"
        );
        assert_eq!(esc("plain web-1"), "plain web-1");
    }

    #[test]
    fn a_copy_field_cannot_be_broken_out_of() {
        let field = copy_field("token", "x\"><script>bad()</script>");
        assert!(!field.contains("<script>"), "{field}");
        assert!(
            field.contains("value=\"x&quot;&gt;&lt;script&gt;"),
            "{field}"
        );
    }
}
