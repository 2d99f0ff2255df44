//! Pallas-Bot's message signature and 60-bit key, byte for byte (v4.3.9,
//! `multi_bot/dedup.py`), so claims made here and by Pallas-Bot land on the same keys.
//!
//! The whitespace set is Python's (`str.strip`, `re` `\s`), which, unlike Rust's, includes
//! U+001C–U+001F; the raw-message rule is Python's `re.sub(r"\.image,.+?\]", ".image]", s)`
//! (`.` does not match a newline).

use std::sync::LazyLock;

use regex::Regex;
use sha2::{Digest, Sha256};

use super::pystr::py_strip;

pub use super::pystr::is_py_whitespace;

/// `normalize_group_plaintext`: strip, then every whitespace run becomes one space.
pub fn normalize_plaintext(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut pending_space = false;
    for c in py_strip(text).chars() {
        if is_py_whitespace(c) {
            pending_space = true;
        } else {
            if pending_space {
                out.push(' ');
                pending_space = false;
            }
            out.push(c);
        }
    }
    out
}

static IMAGE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\.image,.+?\]").expect("valid regex"));

/// `normalize_group_raw_message`: image segments lose their parameters.
pub fn normalize_raw(raw: &str) -> String {
    IMAGE.replace_all(raw, ".image]").into_owned()
}

/// `normalize_message_time`: milliseconds become seconds (only above 10,000,000,000).
pub fn normalize_time(t: i64) -> i64 {
    if t > 10_000_000_000 {
        t.div_euclid(1000)
    } else {
        t
    }
}

/// `cross_bot_message_signature`: (group, user, body) or (group, user, body, time).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Signature {
    pub group_id: i64,
    pub user_id: i64,
    pub body: String,
    pub time: Option<i64>,
}

/// How the body enters the signature (upstream's `use_plaintext`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body {
    /// The plain text, whitespace collapsed (`use_plaintext=True`).
    Plaintext,
    /// The raw message (CQ codes and all), images normalised (`use_plaintext=False`).
    Raw,
}

/// Whether the message time enters the signature (upstream's `include_message_time`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Time {
    Included,
    Excluded,
}

impl Signature {
    pub fn new(group_id: i64, user_id: i64, body: &str, time: i64, kind: Body, with: Time) -> Self {
        Signature {
            group_id,
            user_id,
            body: match kind {
                Body::Plaintext => normalize_plaintext(body),
                Body::Raw => normalize_raw(body),
            },
            time: (with == Time::Included).then(|| normalize_time(time)),
        }
    }

    /// `cross_bot_group_message_key`: the top 60 bits of SHA-256 of `g:u:body[:t]`.
    pub fn key(&self) -> u64 {
        let payload = match self.time {
            Some(t) => format!("{}:{}:{}:{}", self.group_id, self.user_id, self.body, t),
            None => format!("{}:{}:{}", self.group_id, self.user_id, self.body),
        };
        let digest = Sha256::digest(payload.as_bytes());
        let mut top = [0u8; 8];
        top.copy_from_slice(&digest[..8]);
        u64::from_be_bytes(top) >> 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documented_examples() {
        assert_eq!(
            normalize_plaintext("\u{3000} a\u{1c}\u{1f}b\t\n c \u{a0}"),
            "a b c"
        );
        assert_eq!(normalize_raw(".image,]]"), ".image]");
        assert_eq!(normalize_raw("x.image,a]b]"), "x.image]b]");
        assert_eq!(normalize_time(10_000_000_000), 10_000_000_000);
        assert_eq!(normalize_time(10_000_000_001), 10_000_000);
        assert_eq!(
            Signature::new(1, 2, "x", 0, Body::Plaintext, Time::Excluded).key(),
            896694983167751903
        );
        assert_eq!(
            Signature::new(
                12345,
                999,
                "牛牛画画 一只羊",
                0,
                Body::Plaintext,
                Time::Excluded
            )
            .key(),
            213102762946769704
        );
        assert_eq!(
            Signature::new(
                733291779,
                3023094357,
                "八角笼牛",
                100,
                Body::Plaintext,
                Time::Included
            )
            .key(),
            365235075919341561
        );
    }
}
