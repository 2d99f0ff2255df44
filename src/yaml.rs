//! Reading the service's YAML files (the config and the fleet file) with one set of rules:
//! every error names the file, the key and the line and column; an empty file is an error,
//! never "everything default"; a key written twice is an error at its second occurrence.
//!
//! Validated scalars ([`Seconds`], [`AtLeast`]) check their value while the YAML parser is
//! still on it: serde_norway attaches the position of the scalar being read to an error
//! raised inside its visitor, but not to one raised after the value was returned. That is
//! why the checks live in visitors rather than after deserialisation.

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::{self, DeserializeOwned, DeserializeSeed, MapAccess, SeqAccess, Visitor};

/// A config or fleet file that could not be used: which file, and where and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", file.display())]
pub struct FileError {
    pub file: PathBuf,
    pub message: String,
}

impl FileError {
    pub fn new(file: &Path, message: impl Into<String>) -> FileError {
        FileError {
            file: file.to_owned(),
            message: message.into(),
        }
    }
}

mod env;

pub use env::Lookup;

/// Parses a whole YAML file (JSON is YAML too) into `T`.
pub fn from_slice<T: DeserializeOwned>(path: &Path, bytes: &[u8]) -> Result<T, FileError> {
    parse(path, bytes, None)
}

/// As [`from_slice`], with every `${NAME}` in a string value replaced by `lookup(NAME)` (see
/// [`env`]): the config's secrets from the environment.
pub fn from_slice_with_env<T: DeserializeOwned>(
    path: &Path,
    bytes: &[u8],
    lookup: Lookup,
) -> Result<T, FileError> {
    parse(path, bytes, Some(lookup))
}

fn parse<T: DeserializeOwned>(
    path: &Path,
    bytes: &[u8],
    lookup: Option<Lookup>,
) -> Result<T, FileError> {
    let fail = |message: String| FileError::new(path, message);
    let text = std::str::from_utf8(bytes).map_err(|e| fail(format!("not UTF-8 ({e})")))?;
    if is_empty_document(text) {
        // Editors and `cp` truncate a file before writing it: an empty file is a file being
        // written, not a request for every default.
        return Err(fail(
            "the file is empty (write `{}` for an empty mapping)".to_owned(),
        ));
    }
    check_duplicate_keys(text).map_err(fail)?;
    let de = serde_norway::Deserializer::from_str(text);
    match lookup {
        None => serde_path_to_error::deserialize(de).map_err(|e| fail(describe(e))),
        Some(lookup) => serde_path_to_error::deserialize(env::Expand { de, lookup })
            .map_err(|e| fail(describe(e))),
    }
}

/// Only blank lines and comments: what an editor leaves while it rewrites a file.
fn is_empty_document(text: &str) -> bool {
    text.lines().all(|l| {
        let l = l.trim();
        l.is_empty() || l.starts_with('#') || l == "---" || l == "..."
    })
}

/// A YAML error as `key.path: what is wrong at line L column C`.
pub fn describe(e: serde_path_to_error::Error<serde_norway::Error>) -> String {
    let key = e.path().to_string();
    let inner = e.into_inner();
    let mut text = inner.to_string();
    // serde_norway names (part of) the key itself for some errors; never say it twice.
    if let Some((named, rest)) = text.split_once(": ")
        && (key == named
            || key.starts_with(&format!("{named}."))
            || key.starts_with(&format!("{named}[")))
    {
        text = rest.to_owned();
    }
    let mut message = if key == "." || key.is_empty() {
        text
    } else {
        format!("{key}: {text}")
    };
    if let Some(loc) = inner.location()
        && !message.contains(" at line ")
    {
        message.push_str(&format!(" at line {} column {}", loc.line(), loc.column()));
    }
    message
}

/// Rejects a mapping key written twice, at the second occurrence (serde's derived structs
/// would report it at the start of the mapping, and maps would silently keep the last).
fn check_duplicate_keys(text: &str) -> Result<(), String> {
    let de = serde_norway::Deserializer::from_str(text);
    let mut track = serde_path_to_error::Track::new();
    AnyValue
        .deserialize(serde_path_to_error::Deserializer::new(de, &mut track))
        .map_err(|e| describe(serde_path_to_error::Error::new(track.path(), e)))
}

/// Walks any value, checking every mapping's keys.
struct AnyValue;

impl<'de> DeserializeSeed<'de> for AnyValue {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for AnyValue {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_i128<E>(self, _: i128) -> Result<(), E> {
        Ok(())
    }
    fn visit_u128<E>(self, _: u128) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(AnyValue)?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while map.next_key_seed(Key(&mut seen))?.is_some() {
            map.next_value_seed(AnyValue)?;
        }
        Ok(())
    }
    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<(), A::Error> {
        use de::VariantAccess;
        let ((), variant) = data.variant_seed(AnyValue)?;
        variant.newtype_variant_seed(AnyValue)
    }
}

/// One mapping key; the check runs inside the key's visitor so the error carries its position.
struct Key<'a>(&'a mut HashSet<String>);

impl<'de> DeserializeSeed<'de> for Key<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl Key<'_> {
    fn check<E: de::Error>(self, key: String) -> Result<(), E> {
        if self.0.insert(key.clone()) {
            Ok(())
        } else {
            Err(E::custom(format!("duplicate key `{key}`")))
        }
    }
}

impl<'de> Visitor<'de> for Key<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a mapping key")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.check(v.to_string())
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.check(v.to_string())
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.check(v.to_string())
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        self.check(v.to_string())
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.check(v.to_owned())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.check("~".to_owned())
    }
    // Complex keys are legal YAML and never used by us: not compared.
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        AnyValue.visit_seq(seq)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        AnyValue.visit_map(map)
    }
}

/// A number of seconds (fractions allowed), at least `MIN_MS` milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Seconds<const MIN_MS: u64>(Duration);

impl<const MIN_MS: u64> Seconds<MIN_MS> {
    /// A value known to be valid (defaults); panics below the minimum.
    pub const fn secs(s: u64) -> Self {
        assert!(s * 1000 >= MIN_MS);
        Seconds(Duration::from_secs(s))
    }

    /// A value in milliseconds known to be valid (defaults); panics below the minimum.
    pub const fn millis(ms: u64) -> Self {
        assert!(ms >= MIN_MS);
        Seconds(Duration::from_millis(ms))
    }

    pub fn get(self) -> Duration {
        self.0
    }

    /// Checks a value given in seconds.
    pub fn new(v: f64) -> Result<Self, String> {
        let min = MIN_MS as f64 / 1000.0;
        if !v.is_finite() || v < min || v > 1e9 {
            return Err(format!("must be a number of seconds ≥ {min} (got {v})"));
        }
        Ok(Seconds(Duration::from_secs_f64(v)))
    }
}

impl<const MIN_MS: u64> std::ops::Deref for Seconds<MIN_MS> {
    type Target = Duration;
    fn deref(&self) -> &Duration {
        &self.0
    }
}

impl<'de, const MIN_MS: u64> serde::Deserialize<'de> for Seconds<MIN_MS> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<const M: u64>;
        impl<const M: u64> Visitor<'_> for V<M> {
            type Value = Seconds<M>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number of seconds")
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Seconds<M>, E> {
                Seconds::new(v).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Seconds<M>, E> {
                self.visit_f64(v as f64)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Seconds<M>, E> {
                self.visit_f64(v as f64)
            }
        }
        d.deserialize_f64(V::<MIN_MS>)
    }
}

/// A whole number of at least `MIN`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct AtLeast<const MIN: u64>(pub u64);

impl<const MIN: u64> AtLeast<MIN> {
    pub fn get(self) -> u64 {
        self.0
    }
}

impl<'de, const MIN: u64> serde::Deserialize<'de> for AtLeast<MIN> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<const M: u64>;
        impl<const M: u64> Visitor<'_> for V<M> {
            type Value = AtLeast<M>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "a whole number ≥ {M}")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<AtLeast<M>, E> {
                if v < M {
                    return Err(E::custom(format!("must be at least {M} (got {v})")));
                }
                Ok(AtLeast(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<AtLeast<M>, E> {
                if v < 0 {
                    return Err(E::custom(format!("must be at least {M} (got {v})")));
                }
                self.visit_u64(v as u64)
            }
        }
        d.deserialize_u64(V::<MIN>)
    }
}

/// A non-negative number no larger than `MAX` (weights, capacities, ratios): a negative, a
/// non-number, infinity or an absurd size is refused with the value it got.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct Amount<const MAX: u64>(pub f64);

/// A weight or a capacity: messages per day or channels, up to a trillion.
pub type Quantity = Amount<1_000_000_000_000>;

impl<const MAX: u64> Amount<MAX> {
    pub fn get(self) -> f64 {
        self.0
    }

    pub fn new(v: f64) -> Result<Self, String> {
        if !v.is_finite() || v < 0.0 || v > MAX as f64 {
            return Err(format!("must be a number from 0 to {MAX} (got {v})"));
        }
        Ok(Amount(v))
    }
}

impl<'de, const MAX: u64> serde::Deserialize<'de> for Amount<MAX> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<const M: u64>;
        impl<const M: u64> Visitor<'_> for V<M> {
            type Value = Amount<M>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "a number from 0 to {M}")
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Amount<M>, E> {
                Amount::new(v).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Amount<M>, E> {
                self.visit_f64(v as f64)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Amount<M>, E> {
                self.visit_f64(v as f64)
            }
        }
        d.deserialize_f64(V::<MAX>)
    }
}

/// A value checked by `check` while the parser is on it: `S: From<String>` strings that must
/// pass a test, e.g. a socket address or a URL scheme. `check` gets the text and returns the
/// error message.
pub fn checked_str<'de, D, T>(
    d: D,
    check: impl FnOnce(&str) -> Result<T, String>,
) -> Result<T, D::Error>
where
    D: de::Deserializer<'de>,
{
    struct V<F>(F);
    impl<T, F: FnOnce(&str) -> Result<T, String>> Visitor<'_> for V<F> {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a string")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
            (self.0)(v).map_err(E::custom)
        }
    }
    d.deserialize_str(V(check))
}

/// An address like `127.0.0.1:8080`.
pub fn socket_addr<'de, D: de::Deserializer<'de>>(d: D) -> Result<std::net::SocketAddr, D::Error> {
    checked_str(d, |text| {
        text.parse()
            .map_err(|e| format!("{text:?} is not an address like 127.0.0.1:8080 ({e})"))
    })
}

/// A string that must not be empty (ids, names, prefixes).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NonEmpty(pub String);

impl<'de> serde::Deserialize<'de> for NonEmpty {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        checked_str(d, |s| {
            if s.is_empty() {
                Err("must not be empty".to_owned())
            } else {
                Ok(NonEmpty(s.to_owned()))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[derive(serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    struct T {
        #[serde(default)]
        interval: Option<Seconds<60_000>>,
        #[serde(default)]
        #[allow(dead_code)]
        ttl: Option<AtLeast<60>>,
        #[serde(default)]
        #[allow(dead_code)]
        map: BTreeMap<String, u32>,
    }

    fn parse(text: &str) -> Result<T, String> {
        from_slice::<T>(Path::new("f.yaml"), text.as_bytes()).map_err(|e| e.to_string())
    }

    #[test]
    fn value_errors_carry_their_position() {
        assert_eq!(
            parse("interval: 30\n").unwrap_err(),
            "f.yaml: interval: must be a number of seconds ≥ 60 (got 30) at line 1 column 11"
        );
        assert!(
            parse("map: {}\ninterval: .nan\n")
                .unwrap_err()
                .contains("got NaN) at line 2")
        );
        assert!(
            parse("ttl: 5\n")
                .unwrap_err()
                .contains("ttl: must be at least 60 (got 5) at line 1")
        );
        assert_eq!(
            parse("interval: 90\n")
                .unwrap()
                .interval
                .unwrap()
                .get()
                .as_secs(),
            90
        );
    }

    #[test]
    fn a_duplicate_key_is_reported_where_it_is() {
        assert_eq!(
            parse("interval: 60\nttl: 60\ninterval: 70\n").unwrap_err(),
            "f.yaml: interval: duplicate key `interval` at line 3 column 1"
        );
        assert_eq!(
            parse("map:\n  a: 1\n  b: 2\n  a: 3\n").unwrap_err(),
            "f.yaml: map.a: duplicate key `a` at line 4 column 3"
        );
    }

    #[test]
    fn empty_files_are_errors() {
        for text in ["", "\n  \n", "# only a comment\n", "---\n"] {
            assert!(
                parse(text).unwrap_err().contains("the file is empty"),
                "{text:?}"
            );
        }
        assert!(parse("{}").is_ok());
        assert!(parse("\u{0}\u{ff}").is_err());
    }
}
