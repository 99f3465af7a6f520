//! The timeline drawn as inline SVG: a header of column labels (each
//! column one event, its `#index` and what it was), one lane per actor,
//! bars for parks and prestart phases, lines across every lane for the
//! user's commands, and the event that broke an invariant ringed.
//!
//! Every element a reader (or a test) looks for carries its meaning in
//! classes and `data-` attributes: `data-lane`, `data-kind`,
//! `data-index`, `data-command`, `data-invariant`.

use super::markup::esc;
use super::timeline::{MarkKind, Timeline};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

const LABEL_W: usize = 170;
const COL_W: usize = 22;
const HEADER_H: usize = 240;
/// A column's label is cut to this many characters (its event's full
/// line is in the history table and the mark's tooltip).
const LABEL_CHARS: usize = 42;
const LANE_H: usize = 40;

/// What the drawing highlights: the events that broke invariants (with
/// the ids of what they broke) and the events the violations cite.
#[derive(Default)]
pub struct Highlights {
    pub broken: BTreeMap<usize, Vec<String>>,
    pub cited: BTreeSet<usize>,
}

pub fn draw(t: &Timeline, hl: &Highlights) -> String {
    let cols = t.columns.len().max(1);
    let width = LABEL_W + cols * COL_W + 160;
    let height = HEADER_H + t.lanes.len() * LANE_H + 10;
    let x = |index: usize| LABEL_W + t.column(index) * COL_W + COL_W / 2;
    let lane_y = |lane: &super::timeline::Lane| {
        HEADER_H + t.lanes.iter().position(|l| l == lane).unwrap_or(0) * LANE_H + LANE_H / 2
    };
    let bottom = HEADER_H + t.lanes.len() * LANE_H;
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg class=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" \
         height=\"{height}\" viewBox=\"0 0 {width} {height}\" role=\"img\">"
    );
    for (n, lane) in t.lanes.iter().enumerate() {
        let y = HEADER_H + n * LANE_H;
        let _ = write!(
            s,
            "<g class=\"lane\" data-lane=\"{key}\"><rect class=\"lane-bg lane-{parity}\" x=\"0\" \
             y=\"{y}\" width=\"{width}\" height=\"{LANE_H}\"/><text class=\"lane-title\" x=\"8\" \
             y=\"{ty}\">{title}</text></g>",
            key = esc(&lane.key()),
            parity = n % 2,
            ty = y + LANE_H / 2 + 4,
            title = esc(&lane.title()),
        );
    }
    // Column headers: the event each column is.
    let labels: BTreeMap<usize, (&str, &str)> = t
        .marks
        .iter()
        .map(|m| (m.index, (m.label.as_str(), m.kind.key())))
        .chain(
            t.commands
                .iter()
                .map(|c| (c.index, (c.label.as_str(), "command"))),
        )
        .collect();
    for &index in &t.columns {
        let (label, kind) = labels.get(&index).copied().unwrap_or(("", "point"));
        let cx = x(index);
        let broken = hl.broken.get(&index);
        let mark = broken.map_or(String::new(), |ids| format!(" \u{2717}{}", ids.join(",")));
        // Cut, with what it broke, to fit the header.
        let text = format!("#{index}{mark} {label}");
        let text: String = if text.chars().count() > LABEL_CHARS {
            text.chars()
                .take(LABEL_CHARS - 1)
                .chain(['\u{2026}'])
                .collect()
        } else {
            text
        };
        let time = t.times.get(&index).map_or(String::new(), |us| {
            format!(" +{:.1}ms", *us as f64 / 1000.0)
        });
        let _ = write!(
            s,
            "<line class=\"grid\" x1=\"{cx}\" y1=\"{HEADER_H}\" x2=\"{cx}\" y2=\"{bottom}\"/>\
             <a href=\"#e{index}\"><text class=\"col-label {kind}{b}\" data-index=\"{index}\" \
             transform=\"translate({tx},{ty}) rotate(-60)\">{text}<title>{time}</title></text></a>",
            b = if broken.is_some() { " broken" } else { "" },
            tx = cx + 4,
            ty = HEADER_H - 6,
            text = esc(&text),
            time = esc(time.trim()),
        );
    }
    for bar in &t.bars {
        let (x1, x2) = (x(bar.from), x(bar.to));
        let y = lane_y(&bar.lane);
        let _ = write!(
            s,
            "<rect class=\"bar {kind}\" data-kind=\"{kind}\" data-lane=\"{lane}\" x=\"{x1}\" \
             y=\"{by}\" width=\"{w}\" height=\"12\" rx=\"3\"><title>{label}</title></rect>",
            kind = bar.kind.key(),
            lane = esc(&bar.lane.key()),
            by = y - 6,
            w = (x2 - x1).max(4),
            label = esc(&bar.label),
        );
        if bar.kind == super::timeline::BarKind::PrestartSkipped {
            let _ = write!(
                s,
                "<text class=\"bar-note\" x=\"{x1}\" y=\"{ty}\">prestart skipped</text>",
                ty = y + 17
            );
        }
    }
    for c in &t.commands {
        let cx = x(c.index);
        let _ = write!(
            s,
            "<g class=\"command {what}\" data-command=\"{what}\" data-index=\"{index}\">\
             <line x1=\"{cx}\" y1=\"{HEADER_H}\" x2=\"{cx}\" y2=\"{bottom}\"/>\
             <title>#{index} {label}</title></g>",
            what = c.what,
            index = c.index,
            label = esc(&c.label),
        );
    }
    for m in &t.marks {
        let (cx, cy) = (x(m.index), lane_y(&m.lane));
        let broken = hl.broken.get(&m.index);
        let mut class = format!("mark {}", m.kind.key());
        if broken.is_some() {
            class += " broken";
        } else if hl.cited.contains(&m.index) {
            class += " cited";
        }
        let _ = write!(
            s,
            "<a href=\"#e{index}\"><g class=\"{class}\" id=\"m{index}-{lane}\" data-index=\"{index}\" \
             data-lane=\"{lane}\" data-kind=\"{kind}\"{inv}>",
            index = m.index,
            lane = esc(&m.lane.key()),
            kind = m.kind.key(),
            inv = broken.map_or(String::new(), |ids| format!(
                " data-invariant=\"{}\"",
                esc(&ids.join(" "))
            )),
        );
        if broken.is_some() {
            let _ = write!(
                s,
                "<circle class=\"halo\" cx=\"{cx}\" cy=\"{cy}\" r=\"11\"/>"
            );
        }
        s += &shape(m.kind, cx, cy);
        let _ = write!(s, "<title>#{} {}</title></g></a>", m.index, esc(&m.detail));
    }
    s += "</svg>";
    s
}

fn shape(kind: MarkKind, cx: usize, cy: usize) -> String {
    let (l, r, t, b) = (cx - 6, cx + 6, cy - 6, cy + 6);
    match kind {
        MarkKind::Point => format!("<circle cx=\"{cx}\" cy=\"{cy}\" r=\"4\"/>"),
        MarkKind::Fault => format!("<polygon points=\"{cx},{t} {r},{cy} {cx},{b} {l},{cy}\"/>"),
        MarkKind::ExecAllowed | MarkKind::ExecDenied => format!(
            "<rect x=\"{}\" y=\"{}\" width=\"10\" height=\"10\"/>",
            cx - 5,
            cy - 5
        ),
        MarkKind::Exit => format!("<polygon points=\"{l},{t} {r},{t} {cx},{b}\"/>"),
        MarkKind::AgentKilled | MarkKind::Intervention => {
            format!("<path d=\"M{l},{t} L{r},{b} M{r},{t} L{l},{b}\"/>")
        }
        MarkKind::AgentRestored => format!("<circle cx=\"{cx}\" cy=\"{cy}\" r=\"6\"/>"),
    }
}
