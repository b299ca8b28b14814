//! The shapes and the file reader, by hand.

use std::borrow::Cow;
use std::io::Read;

use super::file::*;
use super::shapes::*;
use super::*;
use crate::SECOND;

/// A source that never ends, of one byte repeated, counting what was
/// read from it.
struct Endless {
    byte: u8,
    read: u64,
}

impl Read for Endless {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        buf.fill(self.byte);
        self.read += buf.len() as u64;
        Ok(buf.len())
    }
}

fn traffic(text: &str) -> Result<Traffic, String> {
    read(text.as_bytes(), "t.csv", 0, MAX_EVENTS).map_err(|e| e.to_string())
}

#[test]
fn rfc3339_times() {
    assert_eq!(timestamp("1970-01-01T00:00:00Z"), Ok(0));
    assert_eq!(timestamp("1970-01-01T00:00:01.5Z"), Ok(1_500_000_000));
    assert_eq!(
        timestamp("2024-02-29T12:00:00+01:00"),
        Ok(1_709_204_400_000_000_000)
    );
    assert_eq!(
        timestamp("2024-02-29 11:00:00z"),
        Ok(1_709_204_400_000_000_000)
    );
    assert_eq!(
        timestamp("1677-09-21T00:12:43.145224192Z"),
        Ok(i64::MIN),
        "the first nanosecond in range"
    );
    for bad in [
        "2024-13-01T00:00:00Z",
        "2024-02-30T00:00:00Z",
        "2024-02-29T12:00:00",
        "yesterday",
    ] {
        let e = timestamp(bad).unwrap_err();
        assert!(e.contains(&format!("{bad:?}")), "{e}");
        assert!(e.contains("neither seconds nor an RFC 3339 time"), "{e}");
    }
    for far in ["1677-09-21T00:12:43.145224191Z", "9999-12-31T23:59:59Z"] {
        let e = timestamp(far).unwrap_err();
        assert!(
            e.contains(&format!("timestamp {far:?} is out of range")),
            "{e}"
        );
    }
}

#[test]
fn seconds_are_exact_nanoseconds_in_range() {
    // An f64 holds 1733047200.123456789 s only to about 240 ns.
    assert_eq!(
        timestamp("1733047200.123456789"),
        Ok(1_733_047_200_123_456_789)
    );
    assert_eq!(timestamp("-1.5"), Ok(-1_500_000_000));
    assert_eq!(timestamp("+.25"), Ok(250_000_000));
    assert_eq!(timestamp(" 7 "), Ok(7_000_000_000));
    assert_eq!(timestamp("0.0000000015"), Ok(2), "half a ns rounds up");
    assert_eq!(timestamp("-0.0000000015"), Ok(-2));
    assert_eq!(timestamp("1.5e3"), Ok(1_500_000_000_000));
    assert_eq!(timestamp("9223372036.854775807"), Ok(i64::MAX));
    assert_eq!(timestamp("-9223372036.854775808"), Ok(i64::MIN));
    for far in [
        "9223372036.854775808",
        "-9223372036.854775809",
        "1e300",
        "-1e300",
        "9.3e9",
        "99999999999999999999999999",
    ] {
        let e = timestamp(far).unwrap_err();
        assert!(
            e.contains(&format!("timestamp {far:?} is out of range")),
            "{e}"
        );
    }
    for odd in ["inf", "NaN", "-infinity"] {
        let e = timestamp(odd).unwrap_err();
        assert!(e.contains("not a finite number"), "{e}");
    }
}

#[test]
fn csv_rows_with_quoted_fields() {
    let mut csv = Csv::new();
    let mut row = |line: &str| {
        csv.row(line)
            .map(|r| (r.t, r.key.map(Cow::into_owned), r.n))
    };
    assert_eq!(
        row(" 1.5 , alice , 3 "),
        Ok((1_500_000_000, Some("alice".to_string()), 3))
    );
    assert_eq!(row("0,\"a,b\",2"), Ok((0, Some("a,b".to_string()), 2)));
    assert_eq!(
        row("0,\"say \"\"hi\"\"\""),
        Ok((0, Some("say \"hi\"".to_string()), 1))
    );
    assert_eq!(row("\"1\""), Ok((1_000_000_000, None, 1)));
    assert_eq!(row("0,a\rb"), Ok((0, Some("a\rb".to_string()), 1)));
    // Columns are the field's first byte on the line.
    assert_eq!(row("1,a,x").map_err(|e| e.0), Err(5));
    assert_eq!(row("1,\"a,b\",x").map_err(|e| e.0), Err(9));
    let (col, msg) = row("0,a,1,2").unwrap_err();
    assert_eq!(col, 7);
    assert!(msg.contains("too many fields"), "{msg}");
    let (col, msg) = row("soon,a").unwrap_err();
    assert_eq!(col, 1);
    assert!(msg.contains("\"soon\""), "{msg}");
}

#[test]
fn json_rows() {
    let r = json_row(r#"{"t": "1970-01-01T00:00:02Z", "key": "bob"}"#)
        .map_err(|e| e.1)
        .unwrap();
    assert_eq!(
        (r.t, r.key.as_deref(), r.n),
        (2_000_000_000, Some("bob"), 1)
    );
    let r = json_row(r#"{"t": 1733047200, "key": 7, "n": 2}"#)
        .map_err(|e| e.1)
        .unwrap();
    assert_eq!(
        (r.t, r.key.as_deref(), r.n),
        (1_733_047_200_000_000_000, Some("7"), 2)
    );
    // Milliseconds are not seconds: far out of range.
    let e = json_row(r#"{"t": 1733047200123}"#).err().unwrap().1;
    assert!(e.contains("\"1733047200123\" is out of range"), "{e}");
    // A float is shown as serde_json writes it.
    let e = json_row(r#"{"t": 1e300}"#).err().unwrap().1;
    assert!(e.contains("\"1e+300\" is out of range"), "{e}");
}

#[test]
fn a_line_is_read_up_to_its_bound() {
    let mut buf = Vec::new();
    let mut lines = |text: &[u8], max: usize| {
        let mut input = text;
        let mut out = Vec::new();
        loop {
            let line = next_line(&mut input, &mut buf, max).unwrap();
            out.push((line, String::from_utf8_lossy(&buf).into_owned()));
            if out.last().is_some_and(|l| l.0 != Line::Read) {
                return out;
            }
        }
    };
    let read = |s: &str| (Line::Read, s.to_string());
    assert_eq!(
        lines(b"abc\n\nabcd", 4),
        [
            read("abc"),
            read(""),
            read("abcd"),
            (Line::End, String::new())
        ]
    );
    assert_eq!(
        lines(b"abcd\nabcde\n", 4),
        [read("abcd"), (Line::TooLong, "abcde".to_string())]
    );
}

#[test]
fn an_endless_line_is_refused_after_at_most_the_bound() {
    let mut zeros = Endless { byte: 0, read: 0 };
    let e = read(&mut zeros, "/dev/zero", 0, MAX_EVENTS).unwrap_err();
    assert_eq!(e.to_string(), "/dev/zero: line 1 is longer than 1 MiB");
    // The line, and what the buffered reader had read ahead.
    assert!(zeros.read <= MAX_LINE as u64 + 8192, "{} bytes", zeros.read);

    let mut rest = Endless {
        byte: b'7',
        read: 0,
    };
    let e = read(b"0,a\n".chain(&mut rest), "log", 0, MAX_EVENTS).unwrap_err();
    assert_eq!(e.to_string(), "log: line 2 is longer than 1 MiB");
}

#[test]
fn files_are_sorted_offset_and_bounded() {
    // Out of order, negative, simultaneous: in time order, file order
    // kept among simultaneous rows, offsets from the earliest.
    let t = traffic("time,key\n2,a\n-1,b\n-1,c\n# note\n\n-1,b\n").unwrap();
    let got: Vec<(u64, &str)> = t
        .events
        .iter()
        .map(|e| (e.t, t.keys[e.key as usize].as_str()))
        .collect();
    assert_eq!(got, [(0, "b"), (0, "c"), (0, "b"), (3_000_000_000, "a")]);
    assert_eq!(t.duration, 3_000_000_001);

    let e = read(&b"0\n1\n2\n3\n"[..], "t.csv", 0, 3).unwrap_err();
    assert_eq!(
        e.to_string(),
        "t.csv: line 4: more than 3 requests, the most one simulation replays"
    );
    // 2^60 ns apart is the most.
    assert!(traffic("0\n1152921504.606846976\n").is_ok());
    let e = traffic("1152921504.606846977\n0\n").unwrap_err();
    assert_eq!(
        e,
        "t.csv: line 1 is 37 years after line 2: the requests must span at most about 36 years"
    );
}

#[test]
fn lines_must_be_utf8() {
    let e = read(&b"0,a\n1,\xffb\n"[..], "t.csv", 0, MAX_EVENTS).unwrap_err();
    assert_eq!(e.to_string(), "t.csv: line 2, column 3: not UTF-8");
}

#[test]
fn the_boundary_shape_is_bounded() {
    let args = ShapeArgs {
        duration: 60 * SECOND,
        seed: 1,
        limit: MAX_EVENTS / 2 + 1,
        window: 60 * SECOND,
        rate: 1.0,
    };
    let e = shape("boundary", &args).unwrap_err().to_string();
    assert!(
        e.contains("--traffic boundary would make about 100000002 requests"),
        "{e}"
    );
    let fits = ShapeArgs { limit: 3, ..args };
    assert_eq!(shape("boundary", &fits).unwrap().events.len(), 6);
}

#[test]
fn a_steady_shape_makes_rate_times_duration_requests() {
    let args = |secs: u64| ShapeArgs {
        duration: secs * SECOND,
        seed: 1,
        limit: 1,
        window: SECOND,
        rate: 1.0,
    };
    for (spec, secs, want) in [
        ("steady:150/s", 12, 1800),
        ("steady:500/s", 4, 2000),
        ("steady:3/s", 7, 21),
        ("steady:7/min", 60, 7),
    ] {
        let t = shape(spec, &args(secs)).unwrap();
        assert_eq!(t.events.len(), want, "{spec} for {secs} s");
        assert!(t.events.last().unwrap().t < secs * SECOND, "{spec}");
    }
}
