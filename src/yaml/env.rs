//! `${NAME}` in any string value of the config: the environment variable `NAME`, so that
//! tokens and passwords live in the environment (a systemd `EnvironmentFile`, a container's
//! secrets) rather than in the file. `$${` writes a literal `${`.
//!
//! Expanded while the parser is on the scalar (a deserializer adapter wrapping every visitor),
//! so an unset variable is an error that names the key, the line and the column, like every
//! other error of the file; a value is never part of a message.

use std::borrow::Cow;
use std::fmt;

use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor,
};

/// Where variables come from (the process's environment, or a test's table).
pub type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// `text` with every `${NAME}` replaced by its value; an error names the first unset or
/// malformed one.
pub fn expand<'t>(text: &'t str, lookup: Lookup) -> Result<Cow<'t, str>, String> {
    if !text.contains('$') {
        return Ok(Cow::Borrowed(text));
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        if let Some(literal) = after.strip_prefix("$${") {
            out.push_str("${");
            rest = literal;
        } else if let Some(inside) = after.strip_prefix("${") {
            let end = inside
                .find('}')
                .ok_or_else(|| "`${` without its closing `}`".to_owned())?;
            let name = &inside[..end];
            let valid = !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                return Err(format!(
                    "`${{{name}}}` is not an environment variable's name (letters, digits, `_`)"
                ));
            }
            let value = lookup(name)
                .ok_or_else(|| format!("the environment variable {name} is not set"))?;
            out.push_str(&value);
            rest = &inside[end + 1..];
        } else {
            out.push('$');
            rest = &after[1..];
        }
    }
    out.push_str(rest);
    Ok(Cow::Owned(out))
}

/// A deserializer whose string values are expanded.
pub struct Expand<'a, D> {
    pub de: D,
    pub lookup: Lookup<'a>,
}

macro_rules! forward {
    ($($method:ident),*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
            self.de.$method(Wrap { inner: visitor, lookup: self.lookup })
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Expand<'_, D> {
    type Error = D::Error;

    forward!(
        deserialize_any,
        deserialize_bool,
        deserialize_i8,
        deserialize_i16,
        deserialize_i32,
        deserialize_i64,
        deserialize_i128,
        deserialize_u8,
        deserialize_u16,
        deserialize_u32,
        deserialize_u64,
        deserialize_u128,
        deserialize_f32,
        deserialize_f64,
        deserialize_char,
        deserialize_str,
        deserialize_string,
        deserialize_bytes,
        deserialize_byte_buf,
        deserialize_option,
        deserialize_unit,
        deserialize_seq,
        deserialize_map,
        deserialize_identifier,
        deserialize_ignored_any
    );

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.de.deserialize_unit_struct(
            name,
            Wrap {
                inner: visitor,
                lookup: self.lookup,
            },
        )
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.de.deserialize_newtype_struct(
            name,
            Wrap {
                inner: visitor,
                lookup: self.lookup,
            },
        )
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.de.deserialize_tuple(
            len,
            Wrap {
                inner: visitor,
                lookup: self.lookup,
            },
        )
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.de.deserialize_tuple_struct(
            name,
            len,
            Wrap {
                inner: visitor,
                lookup: self.lookup,
            },
        )
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.de.deserialize_struct(
            name,
            fields,
            Wrap {
                inner: visitor,
                lookup: self.lookup,
            },
        )
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.de.deserialize_enum(
            name,
            variants,
            Wrap {
                inner: visitor,
                lookup: self.lookup,
            },
        )
    }

    fn is_human_readable(&self) -> bool {
        self.de.is_human_readable()
    }
}

/// A visitor (or an access, or a seed) whose strings, and everything below it, are expanded.
struct Wrap<'a, T> {
    inner: T,
    lookup: Lookup<'a>,
}

impl<'a, T> Wrap<'a, T> {
    fn below<U>(&self, inner: U) -> Wrap<'a, U> {
        Wrap {
            inner,
            lookup: self.lookup,
        }
    }
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Wrap<'_, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.inner.expecting(f)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<V::Value, E> {
        match expand(v, self.lookup).map_err(E::custom)? {
            Cow::Borrowed(v) => self.inner.visit_str(v),
            Cow::Owned(v) => self.inner.visit_string(v),
        }
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<V::Value, E> {
        match expand(v, self.lookup).map_err(E::custom)? {
            Cow::Borrowed(v) => self.inner.visit_borrowed_str(v),
            Cow::Owned(v) => self.inner.visit_string(v),
        }
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<V::Value, E> {
        let expanded = expand(&v, self.lookup).map_err(E::custom)?.into_owned();
        self.inner.visit_string(expanded)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<V::Value, E> {
        self.inner.visit_bool(v)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<V::Value, E> {
        self.inner.visit_i64(v)
    }
    fn visit_i128<E: de::Error>(self, v: i128) -> Result<V::Value, E> {
        self.inner.visit_i128(v)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<V::Value, E> {
        self.inner.visit_u64(v)
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<V::Value, E> {
        self.inner.visit_u128(v)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<V::Value, E> {
        self.inner.visit_f64(v)
    }
    fn visit_char<E: de::Error>(self, v: char) -> Result<V::Value, E> {
        self.inner.visit_char(v)
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<V::Value, E> {
        self.inner.visit_bytes(v)
    }
    fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<V::Value, E> {
        self.inner.visit_byte_buf(v)
    }
    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_none()
    }
    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_unit()
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        let lookup = self.lookup;
        self.inner.visit_some(Expand { de: d, lookup })
    }
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        let lookup = self.lookup;
        self.inner.visit_newtype_struct(Expand { de: d, lookup })
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        let seq = self.below(seq);
        self.inner.visit_seq(seq)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        let map = self.below(map);
        self.inner.visit_map(map)
    }
    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        let data = self.below(data);
        self.inner.visit_enum(data)
    }
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Wrap<'_, S> {
    type Value = S::Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        self.inner.deserialize(Expand {
            de: d,
            lookup: self.lookup,
        })
    }
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for Wrap<'_, A> {
    type Error = A::Error;
    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, A::Error> {
        let seed = self.below(seed);
        self.inner.next_element_seed(seed)
    }
    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Wrap<'_, A> {
    type Error = A::Error;
    // Keys are names, never expanded.
    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        self.inner.next_key_seed(seed)
    }
    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, A::Error> {
        let seed = self.below(seed);
        self.inner.next_value_seed(seed)
    }
    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

impl<'a, 'de, A: EnumAccess<'de>> EnumAccess<'de> for Wrap<'a, A> {
    type Error = A::Error;
    type Variant = Wrap<'a, A::Variant>;
    fn variant_seed<T: DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<(T::Value, Self::Variant), A::Error> {
        let lookup = self.lookup;
        let (value, variant) = self.inner.variant_seed(seed)?;
        Ok((
            value,
            Wrap {
                inner: variant,
                lookup,
            },
        ))
    }
}

impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for Wrap<'_, A> {
    type Error = A::Error;
    fn unit_variant(self) -> Result<(), A::Error> {
        self.inner.unit_variant()
    }
    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, A::Error> {
        let seed = self.below(seed);
        self.inner.newtype_variant_seed(seed)
    }
    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        let visitor = self.below(visitor);
        self.inner.tuple_variant(len, visitor)
    }
    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        let visitor = self.below(visitor);
        self.inner.struct_variant(fields, visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "TOKEN" => Some("s3cr3t".into()),
            "PASS" => Some("p@ss:w/rd".into()),
            _ => None,
        }
    }

    #[test]
    fn variables_are_expanded_and_literals_kept() {
        assert_eq!(expand("plain", &env).unwrap(), "plain");
        assert_eq!(expand("${TOKEN}", &env).unwrap(), "s3cr3t");
        assert_eq!(
            expand("postgres://u:${PASS}@db/x", &env).unwrap(),
            "postgres://u:p@ss:w/rd@db/x"
        );
        assert_eq!(
            expand("cost: $5, $${TOKEN}", &env).unwrap(),
            "cost: $5, ${TOKEN}"
        );
        assert_eq!(
            expand("${NOPE}", &env).unwrap_err(),
            "the environment variable NOPE is not set"
        );
        assert!(expand("${TOKEN", &env).unwrap_err().contains("closing"));
        assert!(
            expand("${1X}", &env)
                .unwrap_err()
                .contains("not an environment variable")
        );
    }
}
