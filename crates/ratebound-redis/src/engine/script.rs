//! The Lua scripts, the single source of truth for every language: the
//! Python and Node drivers run these same texts (the engine hands them out
//! with each call).

use std::sync::OnceLock;

/// One script: its text and its SHA-1 (what `EVALSHA` names).
#[derive(Debug)]
pub struct Script {
    /// A short name: `gcra`, `fixed_window`, `sliding_window`.
    pub name: &'static str,
    /// The Lua source.
    pub text: &'static str,
    sha: OnceLock<String>,
}

impl PartialEq for Script {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for Script {}

impl Script {
    const fn new(name: &'static str, text: &'static str) -> Script {
        Script {
            name,
            text,
            sha: OnceLock::new(),
        }
    }

    /// The hex SHA-1 of the text, as `SCRIPT LOAD` returns it.
    pub fn sha(&self) -> &str {
        self.sha
            .get_or_init(|| sha1_smol::Sha1::from(self.text).digest().to_string())
    }
}

/// A script's text: `lua/prelude.lua` (the shared helpers), the
/// algorithm's `decide` function, then the tail that calls it: `one.lua`
/// (one key) or `many.lua` (a batch).
macro_rules! script {
    ($file:literal, $tail:literal) => {
        concat!(
            include_str!("../../lua/prelude.lua"),
            include_str!(concat!("../../lua/", $file)),
            include_str!(concat!("../../lua/", $tail))
        )
    };
}

/// The GCRA token bucket.
pub static GCRA: Script = Script::new("gcra", script!("gcra.lua", "one.lua"));
/// The fixed window counter.
pub static FIXED_WINDOW: Script =
    Script::new("fixed_window", script!("fixed_window.lua", "one.lua"));
/// The sliding window counter.
pub static SLIDING_WINDOW: Script =
    Script::new("sliding_window", script!("sliding_window.lua", "one.lua"));
/// [`GCRA`] over many keys in one run (see [`Script::batch`]).
pub static GCRA_BATCH: Script = Script::new("gcra_batch", script!("gcra.lua", "many.lua"));
/// [`FIXED_WINDOW`] over many keys in one run.
pub static FIXED_WINDOW_BATCH: Script = Script::new(
    "fixed_window_batch",
    script!("fixed_window.lua", "many.lua"),
);
/// [`SLIDING_WINDOW`] over many keys in one run.
pub static SLIDING_WINDOW_BATCH: Script = Script::new(
    "sliding_window_batch",
    script!("sliding_window.lua", "many.lua"),
);

impl Script {
    /// The script that runs this one's decision over many keys in one run
    /// (`lua/many.lua`): `KEYS[1..N]`, `ARGV[1]` the clock argument, then
    /// each key's own arguments in order; its reply is the N replies' nine
    /// integers, flat. A batch script is its own batch.
    pub fn batch(&'static self) -> &'static Script {
        match self.name {
            "gcra" => &GCRA_BATCH,
            "fixed_window" => &FIXED_WINDOW_BATCH,
            "sliding_window" => &SLIDING_WINDOW_BATCH,
            _ => self,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn shas_are_hex_sha1() {
        for s in [&super::GCRA, &super::FIXED_WINDOW, &super::SLIDING_WINDOW] {
            assert_eq!(s.sha().len(), 40);
            assert!(s.sha().bytes().all(|b| b.is_ascii_hexdigit()));
        }
        assert_ne!(super::GCRA.sha(), super::FIXED_WINDOW.sha());
        // Each text is the prelude, the algorithm, then its tail.
        let prelude = include_str!("../../lua/prelude.lua");
        for s in [&super::GCRA, &super::FIXED_WINDOW, &super::SLIDING_WINDOW] {
            assert!(s.text.starts_with(prelude), "{}", s.name);
            assert!(
                s.text.ends_with(include_str!("../../lua/one.lua")),
                "{}",
                s.name
            );
            let batch = s.batch();
            assert_eq!(batch.name, format!("{}_batch", s.name));
            assert_eq!(
                batch.text.strip_suffix(include_str!("../../lua/many.lua")),
                s.text.strip_suffix(include_str!("../../lua/one.lua")),
            );
            assert_ne!(batch.sha(), s.sha());
        }
        // The SHA-1 of the empty string, to check the hashing itself.
        assert_eq!(
            sha1_smol::Sha1::from("").digest().to_string(),
            "da39a3ee5e6b4b0d3255bfef95601890afd80709"
        );
    }

    /// Each `function` in a script's code is a closure made on every run
    /// (what that costs: benches/redis/script_cost.py): the algorithm's
    /// `decide` is the only one, its helpers written out in it.
    #[test]
    fn a_run_makes_one_closure() {
        for s in [
            &super::GCRA,
            &super::FIXED_WINDOW,
            &super::SLIDING_WINDOW,
            &super::GCRA_BATCH,
            &super::FIXED_WINDOW_BATCH,
            &super::SLIDING_WINDOW_BATCH,
        ] {
            let code: Vec<&str> = s
                .text
                .lines()
                .map(|l| l.split("--").next().unwrap_or(""))
                .collect();
            let functions: usize = code.iter().map(|l| l.matches("function").count()).sum();
            assert_eq!(functions, 1, "{}", s.name);
            assert!(code.iter().any(|l| l.contains("local function decide(")));
        }
    }
}
