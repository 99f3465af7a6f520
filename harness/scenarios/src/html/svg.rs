//! The timeline drawn as inline SVG: a header of column labels (each
//! column one event, its `#index` and what it was), one lane per actor,
//! bars for parks and prestart phases, lines across every lane for the
//! user's commands, and the event that broke an invariant ringed.
//!
//! Every element a reader (or a test) looks for carries its meaning in
//! `data-` attributes: `data-lane`, `data-kind` (every mark's but a plain
//! point's), `data-i` (the history index), `data-command`,
//! `data-invariant`; the stylesheet colours by them. A page draws hundreds of marks, so each is one `<use>` of a
//! shape defined once, with integer coordinates and no per-mark style.

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

/// The shapes every mark draws, defined once and placed with `<use>`
/// (centred on 0,0). They set no colour: a mark's `fill` and `stroke`,
/// set in the stylesheet by its `data-kind`, are inherited.
const DEFS: &str = "<defs><circle id=\"dot\" r=\"4\"/>\
<polygon id=\"dia\" points=\"0,-6 6,0 0,6 -6,0\"/>\
<rect id=\"sq\" x=\"-5\" y=\"-5\" width=\"10\" height=\"10\"/>\
<polygon id=\"tri\" points=\"-6,-6 6,-6 0,6\"/>\
<path id=\"x\" d=\"M-6,-6L6,6M6,-6L-6,6\"/>\
<circle id=\"ring\" r=\"6\"/><circle id=\"halo\" r=\"11\"/></defs>";

/// The shape in [`DEFS`] a kind of mark is drawn with.
fn shape(kind: MarkKind) -> &'static str {
    match kind {
        MarkKind::Point => "dot",
        MarkKind::Fault => "dia",
        MarkKind::ExecAllowed | MarkKind::ExecDenied => "sq",
        MarkKind::Exit => "tri",
        MarkKind::AgentKilled | MarkKind::Intervention => "x",
        MarkKind::AgentRestored => "ring",
    }
}

/// The column labels are written rotated by -60°: one rotated group for
/// all of them, each placed at the point that the rotation takes to its
/// spot, to the pixel.
fn rotated(x: usize, y: usize) -> (i64, i64) {
    let (sin, cos) = 60f64.to_radians().sin_cos();
    let (x, y) = (x as f64, y as f64);
    (
        (x * cos - y * sin).round() as i64,
        (x * sin + y * cos).round() as i64,
    )
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
         height=\"{height}\" viewBox=\"0 0 {width} {height}\" role=\"img\">{DEFS}"
    );
    for (n, lane) in t.lanes.iter().enumerate() {
        let y = HEADER_H + n * LANE_H;
        let _ = write!(
            s,
            "<g class=\"lane\" data-lane=\"{key}\"><rect class=\"lane-{parity}\" y=\"{y}\" \
             width=\"{width}\" height=\"{LANE_H}\"/><text class=\"lane-title\" x=\"8\" \
             y=\"{ty}\">{title}</text></g>",
            key = esc(&lane.key()),
            parity = n % 2,
            ty = y + LANE_H / 2 + 4,
            title = esc(&lane.title()),
        );
    }
    // A grid line through every column's centre: one pattern.
    let _ = write!(
        s,
        "<pattern id=\"grid\" x=\"{LABEL_W}\" y=\"{HEADER_H}\" width=\"{COL_W}\" \
         height=\"{h}\" patternUnits=\"userSpaceOnUse\"><path class=\"grid\" \
         d=\"M{mid} 0V{h}\"/></pattern><rect fill=\"url(#grid)\" x=\"{LABEL_W}\" \
         y=\"{HEADER_H}\" width=\"{w}\" height=\"{h}\"/>",
        h = bottom - HEADER_H,
        mid = COL_W / 2,
        w = t.columns.len() * COL_W,
    );
    // Column headers: the event each column is.
    let labels: BTreeMap<usize, (&str, MarkKind)> = t
        .marks
        .iter()
        .map(|m| (m.index, (m.label.as_str(), m.kind)))
        .collect();
    let commands: BTreeMap<usize, &str> = t
        .commands
        .iter()
        .map(|c| (c.index, c.label.as_str()))
        .collect();
    s += "<g class=\"col-labels\" transform=\"rotate(-60)\">";
    for &index in &t.columns {
        let (label, class) = match (commands.get(&index), labels.get(&index)) {
            (Some(label), _) => (*label, " class=\"command\""),
            (None, Some((label, MarkKind::ExecDenied))) => (*label, " class=\"exec-denied\""),
            (None, Some((label, _))) => (*label, ""),
            (None, None) => ("", ""),
        };
        let broken = hl.broken.get(&index);
        let class = if broken.is_some() {
            " class=\"broken\""
        } else {
            class
        };
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
        let (lx, ly) = rotated(x(index) + 4, HEADER_H - 6);
        let _ = write!(
            s,
            "<text{class} x=\"{lx}\" y=\"{ly}\">{text}</text>",
            text = esc(&text),
        );
    }
    s += "</g>";
    for bar in &t.bars {
        let (x1, x2) = (x(bar.from), x(bar.to));
        let y = lane_y(&bar.lane);
        let _ = write!(
            s,
            "<rect class=\"bar\" data-kind=\"{kind}\" data-lane=\"{lane}\" x=\"{x1}\" \
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
            "<g class=\"command\" data-command=\"{what}\" data-i=\"{index}\">\
             <path d=\"M{cx} {HEADER_H}V{bottom}\"/><title>#{index} {label}</title></g>",
            what = c.what,
            index = c.index,
            label = esc(&c.label),
        );
    }
    // The marks, one group per lane: each a click target for its history
    // row, whose line (and time) the page's script makes its tooltip
    // (the table holds them once; hundreds of copies would double a page).
    for lane in &t.lanes {
        let _ = write!(
            s,
            "<g class=\"marks\" data-lane=\"{key}\" transform=\"translate(0,{y})\">",
            key = esc(&lane.key()),
            y = lane_y(lane),
        );
        for m in t.marks.iter().filter(|m| &m.lane == lane) {
            let cx = x(m.index);
            let broken = hl.broken.get(&m.index);
            if broken.is_some() {
                let _ = write!(s, "<use class=\"halo\" href=\"#halo\" x=\"{cx}\"/>");
            }
            let class = if broken.is_some() {
                " class=\"broken\""
            } else if hl.cited.contains(&m.index) {
                " class=\"cited\""
            } else {
                ""
            };
            // Most marks are plain points: theirs is the kind a mark
            // without `data-kind` is.
            let kind = match m.kind {
                MarkKind::Point => String::new(),
                kind => format!(" data-kind=\"{}\"", kind.key()),
            };
            let _ = write!(
                s,
                "<use{class} href=\"#{shape}\" x=\"{cx}\" data-i=\"{index}\"{kind}{inv}/>",
                shape = shape(m.kind),
                index = m.index,
                inv = broken.map_or(String::new(), |ids| format!(
                    " data-invariant=\"{}\"",
                    esc(&ids.join(" "))
                )),
            );
        }
        s += "</g>";
    }
    s += "</svg>";
    s
}
