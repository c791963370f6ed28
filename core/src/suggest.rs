//! "Did you mean": the nearest known name to a misspelt key or plugin type. The keys a
//! configuration section takes are read off its type: serde's derived `Deserialize` names
//! its fields when it asks for a struct, so a deserializer that answers with the path down
//! to the section and stops there learns them without any value.

use std::cell::RefCell;

use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, MapAccess, Visitor};

/// The candidate nearest to `name`, if near enough to be a misspelling (Jaro-Winkler
/// similarity of at least 0.8, as clap suggests subcommands).
pub fn nearest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(name, c), c))
        .filter(|(score, c)| *score >= 0.8 && *c != name)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

/// ` (did you mean `x`?)`, or nothing.
pub fn did_you_mean(suggestion: Option<&str>) -> String {
    suggestion.map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default()
}

/// The field names of the struct `T` holds at `path` (dotted, relative to `T`; empty: `T`'s
/// own); empty when not a struct there (a map, an enum, a flattened section).
pub fn fields_at<T: DeserializeOwned>(path: &[&str]) -> Vec<&'static str> {
    let found = RefCell::new(Vec::new());
    let _ = T::deserialize(Capture { path, found: &found });
    found.into_inner()
}

/// The nearest field name to the last part of `unknown` (dotted, relative to `T`).
pub fn nearest_field<T: DeserializeOwned>(unknown: &str) -> Option<&'static str> {
    let parts: Vec<&str> = unknown.split('.').collect();
    let (last, parent) = parts.split_last()?;
    nearest(last, fields_at::<T>(parent))
}

/// Why the capture stopped (never shown).
#[derive(Debug)]
struct Stop;

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stop")
    }
}

impl std::error::Error for Stop {}

impl de::Error for Stop {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Stop
    }
}

/// Answers a struct's request with a map of one key (the next part of the path) until the
/// path is used up, then records the fields asked for.
struct Capture<'p, 'f> {
    path: &'p [&'p str],
    found: &'f RefCell<Vec<&'static str>>,
}

impl<'de> de::Deserializer<'de> for Capture<'_, '_> {
    type Error = Stop;

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Stop> {
        Err(Stop)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, _name: &'static str, visitor: V) -> Result<V::Value, Stop> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Stop> {
        match self.path.split_first() {
            None => {
                self.found.borrow_mut().extend_from_slice(fields);
                Err(Stop)
            }
            Some((key, rest)) => visitor.visit_map(OneKey { key: Some(key), rest, found: self.found }),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf unit
        unit_struct seq tuple tuple_struct map enum identifier ignored_any
    }
}

/// A map holding one key, whose value leads further down the path.
struct OneKey<'p, 'f> {
    key: Option<&'p str>,
    rest: &'p [&'p str],
    found: &'f RefCell<Vec<&'static str>>,
}

impl<'de> MapAccess<'de> for OneKey<'_, '_> {
    type Error = Stop;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Stop> {
        match self.key.take() {
            Some(k) => seed.deserialize(k.into_deserializer()).map(Some),
            None => Ok(None),
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, Stop> {
        seed.deserialize(Capture { path: self.rest, found: self.found })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(dead_code)]
    #[derive(serde::Deserialize)]
    struct Connection {
        bootstrap: String,
        sasl_mechanism: Option<String>,
    }

    #[allow(dead_code)]
    #[derive(serde::Deserialize)]
    struct Section {
        delimiter: char,
        #[serde(default)]
        connection: Option<Connection>,
        batch_size: usize,
    }

    #[test]
    fn fields_are_read_off_the_type_at_any_depth() {
        assert_eq!(fields_at::<Section>(&[]), ["delimiter", "connection", "batch_size"]);
        assert_eq!(fields_at::<Section>(&["connection"]), ["bootstrap", "sasl_mechanism"]);
        assert!(fields_at::<Section>(&["batch_size"]).is_empty());
        assert_eq!(nearest_field::<Section>("delimeter"), Some("delimiter"));
        assert_eq!(nearest_field::<Section>("connection.bootsrap"), Some("bootstrap"));
        assert_eq!(nearest_field::<Section>("colour"), None);
    }

    #[test]
    fn only_near_names_are_suggested() {
        assert_eq!(nearest("tvs", ["tsv", "gufi", "walk"]), None);
        assert_eq!(nearest("gufii", ["tsv", "gufi", "walk"]), Some("gufi"));
        assert_eq!(nearest("mmapplypolcy", ["mmapplypolicy", "s3"]), Some("mmapplypolicy"));
        assert_eq!(did_you_mean(Some("gufi")), " (did you mean `gufi`?)");
        assert_eq!(did_you_mean(None), "");
    }
}
