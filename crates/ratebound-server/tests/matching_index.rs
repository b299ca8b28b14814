//! Matching, continued: each limit's counter key, the wildcard scan against
//! backtracking, and the index ([`Rules`]) against the scan.

mod common;

use common::entries;
use ratebound_server::matching::{find, wildcard_match};
use ratebound_server::model::Config;
use ratebound_server::{Rules, apply_replaces};

fn config(text: &str) -> Config {
    Config::parse(text, "t.yaml").unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn each_limit_has_its_own_counter_key() {
    let c = config(
        "\
domain: k
descriptors:
  - key: a
    rate_limits:
      - name: first
        window: 1500ms
        requests_per_unit: 5
      - name: second
        algorithm: token_bucket
        unit: minute
        requests_per_unit: 50
  - key: b
    rate_limit:
      replaces:
        - name: first
      unit: second
      requests_per_unit: 1
",
    );
    let m = c.find("k", &entries(&[("a", "x")])).unwrap();
    assert_eq!(
        m.limit_state_key(m.limits[0]),
        "#1:k|1:a=1:x@0/fixed_window/1500000000"
    );
    assert_eq!(
        m.limit_state_key(m.limits[1]),
        "#1:k|1:a=1:x@1/token_bucket/60000000000"
    );
    // Replacing the first leaves the second's key as it was.
    let mut both = vec![Some(m.clone()), c.find("k", &entries(&[("b", "y")]))];
    apply_replaces(&mut both);
    let left = both[0].as_ref().unwrap();
    assert_eq!(left.limits.len(), 1);
    assert_eq!(
        left.limit_state_key(left.limits[0]),
        "#1:k|1:a=1:x@1/token_bucket/60000000000"
    );
    // A limit of another rule is marked as such.
    let other = both[1].as_ref().unwrap().limits[0];
    assert_eq!(
        m.limit_state_key(other),
        "#1:k|1:a=1:x@-/fixed_window/1000000000"
    );
}

/// Wildcard matching by plain backtracking, to check the scan against.
fn glob(pattern: &[u8], value: &[u8]) -> bool {
    match pattern.split_first() {
        None => value.is_empty(),
        Some((b'*', rest)) => (0..=value.len()).any(|i| glob(rest, &value[i..])),
        Some((c, rest)) => value.first() == Some(c) && glob(rest, &value[1..]),
    }
}

/// Every string over `alphabet` up to `len` characters.
fn strings(alphabet: &[char], len: usize) -> Vec<String> {
    let mut all = vec![String::new()];
    let mut last = vec![String::new()];
    for _ in 0..len {
        last = last
            .iter()
            .flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}")))
            .collect();
        all.extend(last.iter().cloned());
    }
    all
}

#[test]
fn wildcard_matching_agrees_with_backtracking_on_every_small_case() {
    let patterns: Vec<String> = strings(&['a', 'b', '*'], 5)
        .into_iter()
        .filter(|p| p.contains('*'))
        .collect();
    let values = strings(&['a', 'b'], 6);
    let mut checked = 0;
    for p in &patterns {
        let parts: Vec<String> = p.split('*').map(str::to_string).collect();
        for v in &values {
            assert_eq!(
                wildcard_match(&parts, v),
                glob(p.as_bytes(), v.as_bytes()),
                "{p} ~ {v}"
            );
            checked += 1;
        }
    }
    assert!(checked > 30_000, "{checked}");
}

#[test]
fn the_index_answers_as_the_scan() {
    // Every example, and a tree with every kind of sibling, asked every
    // request of up to three entries over their keys and some values.
    let mixed = "\
domain: mixed
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
    descriptors:
      - key: j
        value: x*
        rate_limit: {unit: second, requests_per_unit: 2}
  - key: k
    value: a*
    share_threshold: true
    descriptors:
      - key: j
        rate_limit: {unit: second, requests_per_unit: 3}
  - key: k
    value: ab
    rate_limit: {unit: second, requests_per_unit: 4}
  - key: k
    value: '*b'
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: j
    value: ab
    rate_limit: {unit: minute, requests_per_unit: 6}
";
    let mut texts: Vec<&str> = common::ALL.iter().map(|(_, t)| *t).collect();
    texts.push(mixed);
    let mut compared = 0;
    let mut found = 0;
    for text in texts {
        let c = config(text);
        let rules = Rules::new(c.clone());
        let domain = c.domains.keys().next().unwrap().clone();
        let mut keys: Vec<String> = vec!["k".into(), "j".into(), "none".into()];
        let mut values: Vec<String> = vec!["ab".into(), "xb".into(), "a".into(), "".into()];
        fn gather(
            list: &[ratebound_server::model::Descriptor],
            keys: &mut Vec<String>,
            values: &mut Vec<String>,
        ) {
            for d in list {
                keys.push(d.key.clone());
                if let Some(v) = &d.value {
                    let text = match v {
                        ratebound_server::model::Value::Exact(e) => e.clone(),
                        ratebound_server::model::Value::Wildcard(p) => p.join("Z"),
                    };
                    values.push(text);
                }
                gather(&d.children, keys, values);
            }
        }
        gather(&c.domains[&domain].descriptors, &mut keys, &mut values);
        keys.sort();
        keys.dedup();
        values.sort();
        values.dedup();
        let pairs: Vec<(String, String)> = keys
            .iter()
            .flat_map(|k| values.iter().map(move |v| (k.clone(), v.clone())))
            .collect();
        let mut requests: Vec<Vec<(String, String)>> =
            pairs.iter().map(|p| vec![p.clone()]).collect();
        for a in &pairs {
            for b in &pairs {
                requests.push(vec![a.clone(), b.clone()]);
            }
        }
        for r in requests.clone().into_iter().take(3000) {
            if r.len() == 2 {
                for p in pairs.iter().take(6) {
                    let mut three = r.clone();
                    three.push(p.clone());
                    requests.push(three);
                }
            }
        }
        for r in &requests {
            let scanned = find(&c.domains[&domain], r);
            assert_eq!(rules.find(&domain, r), scanned, "{domain} {r:?}");
            found += usize::from(scanned.is_some());
            compared += 1;
        }
    }
    assert!(compared > 10_000, "{compared}");
    assert!(found > 50, "{found}");
}

#[test]
fn a_level_of_many_values_is_indexed() {
    let mut text = String::from(
        "domain: big\ndescriptors:\n  - key: ip\n    rate_limit: {unit: second, requests_per_unit: 10}\n",
    );
    for i in 0..5_000 {
        text.push_str(&format!(
            "  - key: ip\n    value: 10.0.{}.{}\n    rate_limit: {{unit: second, requests_per_unit: 0}}\n",
            i / 256,
            i % 256
        ));
    }
    let rules = Rules::new(config(&text));
    let blocked = rules
        .find("big", &entries(&[("ip", "10.0.19.135")]))
        .unwrap();
    assert_eq!(blocked.limits[0].requests_per_unit, 0);
    assert_eq!(blocked.metric_key, "big.ip_10.0.19.135");
    let other = rules.find("big", &entries(&[("ip", "192.0.2.1")])).unwrap();
    assert_eq!(other.limits[0].requests_per_unit, 10);
    assert_eq!(rules.config().domains["big"].descriptors.len(), 5_001);
    assert!(rules.find("absent", &entries(&[("ip", "x")])).is_none());
}
