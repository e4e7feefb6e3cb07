//! The JSON-RPC parser and dispatcher against random and mutated input,
//! in process: the framer and `handle_value` never panic, every answer is
//! a well-formed JSON-RPC response, and how the stream is cut into reads
//! does not change the frames. A seeded generator (xorshift) keeps every
//! run reproducible; `RPC_FUZZ_SEED` and `RPC_FUZZ_ITERS` explore further.

use std::sync::Arc;

use clap::Parser;
use serde_json::{json, Map, Value};
use vhost_mpath::cli::Args;
use vhost_mpath::config::Settings;
use vhost_mpath::disk::Disk;
use vhost_mpath::rpc::{handle_value, parse_error, Frame, Framer, RpcContext, MAX_REQUEST};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn context() -> RpcContext {
    let args = Args::parse_from([
        "vhost-mpath",
        "--socket-path",
        "/nonexistent/fuzz.sock",
        "--path",
        "null:1M,name=a",
        "--path",
        "null:1M,name=b",
    ]);
    let settings = Settings::from_args(&args).unwrap();
    RpcContext {
        disk: Arc::new(Disk::open(&settings).unwrap()),
        num_queues: 1,
        queue_size: 128,
        lab: true,
        config_file: None,
        metrics: None,
    }
}

const METHODS: &[&str] = &[
    "get_version",
    "get_methods",
    "get_device",
    "get_paths",
    "get_stats",
    "reset_stats",
    "set_policy",
    "set_path",
    "add_path",
    "remove_path",
    "failback",
    "inject_fault",
    "save_config",
    "no_such_method",
    "",
];

const KEYS: &[&str] = &[
    "name",
    "device",
    "policy",
    "weight",
    "preferred",
    "state",
    "force",
    "timeout_ms",
    "delay_us",
    "bw_mbps",
    "fail",
    "fail_after",
    "hang",
    "clear",
    "rr_min_io",
    "ewma_shift",
    "weight_period_ms",
    "failback",
    "block_size",
    "direct",
    "bogus",
];

const STRINGS: &[&str] = &[
    "a",
    "b",
    "c",
    "",
    "null:1M",
    "null:2M",
    "null:0",
    "offline",
    "online",
    "round-robin",
    "adaptive",
    "auto",
    "EIO",
    "0x370",
    "-5",
    "manual",
    "\u{0}",
    "\u{1F600}",
    "päth",
];

fn random_value(r: &mut Rng, depth: u32) -> Value {
    match r.below(if depth > 2 { 6 } else { 8 }) {
        0 => Value::Null,
        1 => Value::Bool(r.below(2) == 0),
        2 => json!(r.next() % 200),
        3 => json!(*r.pick(&[-1i64, 0, 1, 100, 101, 65536, i64::MAX, i64::MIN])),
        4 => json!(*r.pick(&[0.5f64, -0.0, 1e300, 3.0])),
        5 => json!(*r.pick(STRINGS)),
        6 => Value::Array(
            (0..r.below(4))
                .map(|_| random_value(r, depth + 1))
                .collect(),
        ),
        _ => Value::Object(random_params(r, depth + 1)),
    }
}

fn random_params(r: &mut Rng, depth: u32) -> Map<String, Value> {
    (0..r.below(5))
        .map(|_| (r.pick(KEYS).to_string(), random_value(r, depth)))
        .collect()
}

/// A request that is mostly well-formed: a known method, plausible params.
fn random_request(r: &mut Rng) -> Value {
    let mut req = Map::new();
    if r.below(10) != 0 {
        req.insert("jsonrpc".into(), json!("2.0"));
    }
    if r.below(8) != 0 {
        req.insert("id".into(), random_value(r, 3));
    }
    req.insert(
        "method".into(),
        if r.below(20) == 0 {
            random_value(r, 3)
        } else {
            json!(r.pick(METHODS))
        },
    );
    if r.below(6) != 0 {
        let params = if r.below(15) == 0 {
            random_value(r, 1)
        } else {
            Value::Object(random_params(r, 1))
        };
        req.insert("params".into(), params);
    }
    Value::Object(req)
}

fn mutate(r: &mut Rng, bytes: &mut Vec<u8>) {
    for _ in 0..=r.below(4) {
        let len = bytes.len().max(1);
        match r.below(7) {
            0 if !bytes.is_empty() => {
                let i = r.below(bytes.len());
                bytes[i] ^= 1 << r.below(8);
            }
            1 => {
                let i = r.below(len);
                bytes.truncate(i);
            }
            2 => {
                let i = r.below(bytes.len() + 1);
                let tok = *r.pick(&[
                    &b"{"[..],
                    b"}",
                    b"[",
                    b"]",
                    b"\"",
                    b"\\",
                    b",",
                    b":",
                    b"\n",
                    b"null",
                    b"1e999",
                    b"\xff\xfe",
                ]);
                bytes.splice(i..i, tok.iter().copied());
            }
            3 if !bytes.is_empty() => {
                let i = r.below(bytes.len());
                bytes.remove(i);
            }
            4 => {
                let copy = bytes.clone();
                bytes.extend_from_slice(&copy);
            }
            5 => {
                let i = r.below(bytes.len() + 1);
                bytes.insert(i, r.next() as u8);
            }
            _ => {}
        }
    }
}

/// Every answer is a JSON-RPC response (or a batch of them).
fn check_response(v: &Value) {
    match v {
        Value::Array(items) => {
            assert!(!items.is_empty(), "an empty batch answer");
            items.iter().for_each(check_one);
        }
        one => check_one(one),
    }
}

fn check_one(v: &Value) {
    assert_eq!(v["jsonrpc"], "2.0", "{v}");
    assert!(v.get("id").is_some(), "no id: {v}");
    match (v.get("result"), v.get("error")) {
        (Some(_), None) => {}
        (None, Some(e)) => {
            let code = e["code"].as_i64().unwrap_or_else(|| panic!("code: {v}"));
            assert!(
                [-32700, -32600, -32601, -32602, -32603, -32000].contains(&code),
                "{v}"
            );
            assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
            assert_ne!(code, -32603, "a handler failed internally: {v}");
        }
        _ => panic!("neither result nor error: {v}"),
    }
}

/// Frames `stream` fed in chunks whose sizes `r` picks.
fn frames_chunked(r: &mut Rng, stream: &[u8]) -> Vec<Frame> {
    let mut f = Framer::default();
    let mut out = Vec::new();
    let mut rest = stream;
    while !rest.is_empty() {
        let n = (r.below(64) + 1).min(rest.len());
        f.push(&rest[..n]);
        rest = &rest[n..];
        while let Some(fr) = f.next_frame() {
            out.push(fr);
        }
    }
    out
}

fn frames_whole(stream: &[u8]) -> Vec<Frame> {
    let mut f = Framer::default();
    f.push(stream);
    std::iter::from_fn(|| f.next_frame()).collect()
}

#[test]
fn random_and_mutated_requests_never_panic() {
    let ctx = context();
    let seed = env_u64("RPC_FUZZ_SEED", 0x5eed_1234_abcd_ef01);
    let iters = env_u64("RPC_FUZZ_ITERS", 20_000);
    let mut r = Rng(seed | 1);
    let mut answered = 0u64;
    for _ in 0..iters {
        // A stream of a few requests and batches, some of them mutated.
        let mut stream = Vec::new();
        for _ in 0..=r.below(3) {
            let v = if r.below(5) == 0 {
                Value::Array((0..r.below(4)).map(|_| random_request(&mut r)).collect())
            } else {
                random_request(&mut r)
            };
            let mut bytes = serde_json::to_vec(&v).unwrap();
            if r.below(3) == 0 {
                mutate(&mut r, &mut bytes);
            }
            stream.extend_from_slice(&bytes);
            if r.below(2) == 0 {
                stream.push(b'\n');
            }
        }
        let whole = frames_whole(&stream);
        assert_eq!(
            frames_chunked(&mut r, &stream),
            whole,
            "the framing of {:?} depends on how it is read",
            String::from_utf8_lossy(&stream)
        );
        for frame in whole {
            if let Frame::Text(text) = frame {
                let answer = match serde_json::from_slice::<Value>(&text) {
                    Ok(v) => handle_value(&ctx, v),
                    Err(e) => Some(parse_error(&e)),
                };
                if let Some(a) = answer {
                    check_response(&a);
                    answered += 1;
                }
            }
        }
    }
    assert!(answered > iters / 2, "only {answered} answers");
    // The disk is still consistent and answers.
    let v = handle_value(
        &ctx,
        json!({"jsonrpc": "2.0", "id": 1, "method": "get_paths"}),
    )
    .unwrap();
    assert!(v["result"]["paths"]
        .as_array()
        .is_some_and(|p| !p.is_empty()));
}

#[test]
fn random_bytes_never_panic_the_framer() {
    let mut r = Rng(env_u64("RPC_FUZZ_SEED", 0xfeed_f00d) | 1);
    let alphabet = b"{}[]\"\\ \n\tab:,0x\xff";
    for _ in 0..2000 {
        let len = r.below(300);
        let stream: Vec<u8> = (0..len)
            .map(|_| {
                if r.below(4) == 0 {
                    r.next() as u8
                } else {
                    *r.pick(alphabet)
                }
            })
            .collect();
        let whole = frames_whole(&stream);
        assert_eq!(frames_chunked(&mut r, &stream), whole);
        for frame in whole {
            if let Frame::Text(t) = frame {
                assert!(matches!(t.first(), Some(b'{' | b'[')), "{t:?}");
                assert!(matches!(t.last(), Some(b'}' | b']')), "{t:?}");
            }
        }
    }
}

#[test]
fn deep_nesting_and_oversized_input_are_refused_cleanly() {
    let ctx = context();
    // serde_json stops at depth 128: a parse error, not a stack overflow.
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let frames = frames_whole(deep.as_bytes());
    assert_eq!(frames.len(), 1);
    let Frame::Text(t) = &frames[0] else {
        panic!("{frames:?}")
    };
    let answer = match serde_json::from_slice::<Value>(t) {
        Ok(v) => handle_value(&ctx, v),
        Err(e) => Some(parse_error(&e)),
    };
    assert_eq!(answer.unwrap()["error"]["code"], -32700);

    let mut f = Framer::default();
    f.push(b"{\"jsonrpc\":\"2.0\",\"method\":\"get_version\",\"params\":{\"x\":\"");
    let chunk = vec![b'a'; 64 * 1024];
    let mut refused = false;
    for _ in 0..(MAX_REQUEST / chunk.len() + 2) {
        f.push(&chunk);
        if f.next_frame() == Some(Frame::TooLarge) {
            refused = true;
            break;
        }
    }
    assert!(refused, "a request over 1 MiB must be refused");
}
