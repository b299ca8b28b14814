//! The CLI's traffic-file reader (`ratebound simulate --traffic FILE`)
//! over arbitrary bytes.

use ratebound_cli::traffic::{self, Traffic};
use ratebound_cli::{MAX_SPAN, SECOND};

/// The most requests a fuzzed file may hold: small, so that the
/// "too many requests" error is reached too.
const MOST: u64 = 256;

/// The longest message a bad file may produce: text from the file is shown
/// cut to about 80 characters, so a message stays short whatever the line.
const LONGEST_MESSAGE: usize = 512;

/// Reads `data` as a traffic file (CSV rows or JSON lines). A file that
/// reads gives requests in time order from 0 to its duration − 1, at most
/// [`MOST`] of them, every key index naming a key and every key named; its
/// requests written back as JSON lines read back to the same requests. A
/// file that does not read gives one short line naming the file, with no
/// control character from the input in it.
pub fn traffic_file(data: &[u8]) {
    match traffic::read(data, "fuzz", data.len() as u64, MOST) {
        Ok(t) => {
            check(&t, data);
            let again = json_lines(&t);
            match traffic::read(again.as_bytes(), "again", again.len() as u64, MOST) {
                Ok(back) => assert_eq!(
                    requests(&back),
                    requests(&t),
                    "{data:?}: written as {again:?}, read back differently"
                ),
                Err(e) => panic!("{data:?}: written as {again:?}, which fails: {e}"),
            }
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.starts_with("fuzz: "), "{data:?}: {msg:?}");
            assert!(
                msg.len() <= LONGEST_MESSAGE,
                "{data:?}: {} bytes: {msg:?}",
                msg.len()
            );
            assert!(
                !msg.chars().any(char::is_control),
                "{data:?}: a control character in {msg:?}"
            );
        }
    }
}

fn check(t: &Traffic, data: &[u8]) {
    let events = &t.events;
    assert!(!events.is_empty(), "{data:?}: no requests, yet no error");
    assert!(
        events.len() as u64 <= MOST,
        "{data:?}: {} requests",
        events.len()
    );
    let lines = data.split(|&b| b == b'\n').count();
    assert!(events.len() <= lines, "{data:?}: more requests than lines");
    assert!(
        events.is_sorted_by_key(|e| e.t),
        "{data:?}: not in time order"
    );
    assert_eq!(events[0].t, 0, "{data:?}: the earliest request is not at 0");
    let last = events[events.len() - 1].t;
    assert_eq!(
        t.duration,
        last + 1,
        "{data:?}: duration {} for a last request at {last}",
        t.duration
    );
    assert!(last <= MAX_SPAN, "{data:?}: the requests span {last} ns");
    let mut named = vec![false; t.keys.len()];
    for e in events {
        let slot = named.get_mut(e.key as usize);
        assert!(
            slot.is_some(),
            "{data:?}: key {} of {}",
            e.key,
            t.keys.len()
        );
        if let Some(s) = slot {
            *s = true;
        }
    }
    assert!(named.iter().all(|&n| n), "{data:?}: a key no request names");
    let mut names = t.keys.clone();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), t.keys.len(), "{data:?}: a key interned twice");
}

/// The requests as (time, key name, tokens).
fn requests(t: &Traffic) -> Vec<(u64, &str, u64)> {
    t.events
        .iter()
        .map(|e| (e.t, t.keys[e.key as usize].as_str(), e.n))
        .collect()
}

/// The requests as JSON lines, times as exact decimal seconds.
fn json_lines(t: &Traffic) -> String {
    let mut out = String::new();
    for (at, key, n) in requests(t) {
        let key = serde_json::Value::String(key.to_string());
        let (s, ns) = (at / SECOND, at % SECOND);
        out.push_str(&format!(
            "{{\"t\":\"{s}.{ns:09}\",\"key\":{key},\"n\":{n}}}\n"
        ));
    }
    out
}
