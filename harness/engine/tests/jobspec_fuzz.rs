//! A fuzz target for the jobspec parser, as property tests: any input,
//! however broken, gives a job or an error with a position inside the
//! source; never a panic and never a stack overflow. The seeds are the
//! repository's `examples/` and the corpus in `fuzz-corpus/` (every tricky
//! case found).
//! `PROPTEST_CASES` sets how many cases each property runs (CI raises it).

use proptest::prelude::*;
use std::path::PathBuf;
use taskgate_engine::jobspec::{parse, JobspecError};

fn corpus() -> Vec<(PathBuf, String)> {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in [
        crate_dir.join("../../examples"),
        crate_dir.join("fuzz-corpus"),
    ] {
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for path in entries.map(|e| e.unwrap().path()) {
            if path.extension().is_some_and(|x| x == "hcl") {
                let text = std::fs::read_to_string(&path).unwrap();
                files.push((path, text));
            }
        }
    }
    files.sort();
    assert!(files.len() >= 3, "the corpus is missing");
    files
}

/// A parse outcome is sound: a job, or an error that points into the source.
fn sound(source: &str) -> Result<(), TestCaseError> {
    match parse(source, "fuzz.hcl") {
        Ok(_) => Ok(()),
        Err(JobspecError::Invalid { line, col, .. }) => {
            let lines = source.lines().count().max(1) + 1;
            prop_assert!(line >= 1 && line <= lines, "line {line} of {lines}");
            prop_assert!(col >= 1);
            Ok(())
        }
        Err(other) => Err(TestCaseError::fail(format!("unexpected error {other}"))),
    }
}

#[test]
fn every_corpus_file_parses_soundly() {
    for (path, text) in corpus() {
        sound(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            parse(&text, "x").is_ok(),
            "{} is a valid job",
            path.display()
        );
    }
}

/// Pieces that matter to HCL's grammar, so mutations hit its corners.
const SIGNIFICANT: &[&str] = &[
    "{", "}", "[", "]", "(", ")", "\"", "\\", "${", "%{", "<<EOF\n", "\nEOF\n", "#", "//", "/*",
    "*/", "=", ",", "\n", "-", "!", "?", ":", "1e999", "\\u0000", "job", "task", "group",
];

/// `at` moved back to a char boundary of `s`.
fn boundary(s: &str, mut at: usize) -> usize {
    at = at.min(s.len());
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    at
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics(source in "\\PC{0,400}") {
        sound(&source)?;
    }

    #[test]
    fn mutated_corpus_files_never_panic(
        file in 0usize..64,
        edits in prop::collection::vec(
            (0usize..10_000, 0usize..SIGNIFICANT.len(), 0u8..3, 1usize..40),
            1..12,
        ),
    ) {
        let corpus = corpus();
        let mut source = corpus[file % corpus.len()].1.clone();
        for (at, piece, kind, len) in edits {
            let at = boundary(&source, at % (source.len() + 1));
            let end = boundary(&source, at + len);
            match kind {
                0 => source.insert_str(at, SIGNIFICANT[piece]),
                1 => source.replace_range(at..end, ""),
                _ => {
                    let copy = source[at..end].repeat(3);
                    source.insert_str(at, &copy);
                }
            }
        }
        sound(&source)?;
    }

    #[test]
    fn deep_and_unbalanced_brackets_never_overflow(
        opens in prop::collection::vec(
            prop::sample::select(vec!["{", "[", "(", "\"${", "job \"j\" {"]),
            0..3000,
        ),
        closes in 0usize..3000,
    ) {
        let source = format!("a = {}{}", opens.concat(), "}".repeat(closes));
        sound(&source)?;
    }
}
