//! Small operations on JSON trees that every other module needs: deep merge, dotted paths,
//! null pruning and the "is this already there?" comparison that keeps steady-state
//! reconciles free of writes.
//!
//! ```
//! use serde_json::json;
//! use windlass::values::{merge, nested_get};
//!
//! let mut config = json!({"db": {"size": "small", "replicas": 1}});
//! merge(&mut config, json!({"db": {"replicas": 3}}));
//! assert_eq!(nested_get(&config, "db.replicas").unwrap(), Some(&json!(3)));
//! assert_eq!(nested_get(&config, "db.size").unwrap(), Some(&json!("small")));
//! ```

use serde_json::{Map, Value};

/// Deep-merge `overrides` into `base`: maps merge key by key, anything else (lists included)
/// is replaced.
pub fn merge(base: &mut Value, overrides: Value) {
    match (base, overrides) {
        (Value::Object(base), Value::Object(overrides)) => {
            for (key, value) in overrides {
                match base.get_mut(&key) {
                    Some(existing) => merge(existing, value),
                    None => {
                        base.insert(key, value);
                    }
                }
            }
        }
        (base, overrides) => *base = overrides,
    }
}

/// A dotted path went through something that is not a map.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot follow `{path}`: `{segment}` is not a map")]
pub struct PathError {
    /// The whole path.
    pub path: String,
    /// The segment whose parent was not a map.
    pub segment: String,
}

/// The value at a dotted path, `None` when any level is missing; an error when an
/// intermediate level is not a map.
pub fn nested_get<'a>(value: &'a Value, path: &str) -> Result<Option<&'a Value>, PathError> {
    let mut current = value;
    for segment in path.split('.') {
        match current {
            Value::Object(map) => match map.get(segment) {
                Some(next) => current = next,
                None => return Ok(None),
            },
            _ => {
                return Err(PathError {
                    path: path.to_string(),
                    segment: segment.to_string(),
                });
            }
        }
    }
    Ok(Some(current))
}

/// Set the value at a dotted path, creating missing levels; an error when an intermediate
/// level exists but is not a map.
pub fn nested_set(value: &mut Value, path: &str, new: Value) -> Result<(), PathError> {
    let mut segments = path.split('.').peekable();
    let mut current = value;
    while let Some(segment) = segments.next() {
        let Value::Object(map) = current else {
            return Err(PathError {
                path: path.to_string(),
                segment: segment.to_string(),
            });
        };
        if segments.peek().is_none() {
            map.insert(segment.to_string(), new);
            return Ok(());
        }
        current = map
            .entry(segment.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    Ok(())
}

/// Drop every map entry whose value is `null`, recursively; empty maps and lists stay.
///
/// Typed Kubernetes objects serialize unset optional fields as absent already; this catches
/// hand-written `json!` manifests, so that "set to null" never reaches an apply by accident.
pub(crate) fn prune_nulls(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(prune_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(prune_nulls),
        _ => {}
    }
}

/// SHA-256 (hex) of the canonical JSON of a value: map keys sorted, so equal trees hash
/// equally whatever order their maps were built in.
///
/// A rollout hashes every object it renders on every reconcile, so the JSON is streamed
/// into the hash through a small buffer rather than built in memory first.
pub(crate) fn canonical_hash(value: &Value) -> String {
    let mut hash = CanonicalHash::new();
    hash.value(value);
    hash.finish()
}

/// [`canonical_hash`] written a piece at a time, for a value the caller does not hold
/// whole: the rollout hashes each rendered manifest with windlass's labels and owner
/// reference laid over it, without making that copy (`rollout::stamp`). The caller writes
/// the JSON punctuation of what it lays over itself, keys in sorted order.
pub(crate) struct CanonicalHash {
    out: HashWriter,
}

impl CanonicalHash {
    pub(crate) fn new() -> Self {
        use sha2::{Digest, Sha256};
        CanonicalHash {
            out: HashWriter {
                hash: Sha256::new(),
                buffer: [0; 256],
                len: 0,
            },
        }
    }

    /// JSON punctuation: `{`, `}`, `[`, `]`, `,` or `:`.
    pub(crate) fn punct(&mut self, byte: u8) {
        self.out.byte(byte);
    }

    /// A string (a map key, say), as serde_json writes it.
    pub(crate) fn string(&mut self, text: &str) {
        self.out.string(text);
    }

    /// A whole value, its maps' keys sorted.
    pub(crate) fn value(&mut self, value: &Value) {
        fn write(value: &Value, out: &mut HashWriter) {
            match value {
                Value::Object(map) => {
                    out.byte(b'{');
                    // serde_json's map is ordered by key unless a crate in the build turns on
                    // its `preserve_order` feature; sort only then.
                    if maps_are_sorted() {
                        write_entries(map.iter(), out);
                    } else {
                        let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                        entries.sort_by_key(|(key, _)| *key);
                        write_entries(entries.into_iter(), out);
                    }
                    out.byte(b'}');
                }
                Value::Array(items) => {
                    out.byte(b'[');
                    for (i, item) in items.iter().enumerate() {
                        if i > 0 {
                            out.byte(b',');
                        }
                        write(item, out);
                    }
                    out.byte(b']');
                }
                Value::String(text) => out.string(text),
                scalar => {
                    // Writing into the hash cannot fail.
                    let _ = serde_json::to_writer(&mut *out, scalar);
                }
            }
        }
        fn write_entries<'a>(
            entries: impl Iterator<Item = (&'a String, &'a Value)>,
            out: &mut HashWriter,
        ) {
            for (i, (key, value)) in entries.enumerate() {
                if i > 0 {
                    out.byte(b',');
                }
                out.string(key);
                out.byte(b':');
                write(value, out);
            }
        }
        write(value, &mut self.out);
    }

    /// The hash of everything written, in lower-case hexadecimal.
    pub(crate) fn finish(mut self) -> String {
        use sha2::Digest;
        self.out.flush_buffer();
        hex(&self.out.hash.finalize())
    }
}

/// The bytes of [`canonical_hash`]'s JSON, gathered in a buffer and fed to the hash a
/// buffer at a time (the JSON comes a few bytes at a time).
struct HashWriter {
    hash: sha2::Sha256,
    buffer: [u8; 256],
    len: usize,
}

impl HashWriter {
    fn byte(&mut self, byte: u8) {
        if self.len == self.buffer.len() {
            self.flush_buffer();
        }
        self.buffer[self.len] = byte;
        self.len += 1;
    }

    /// `text` as serde_json writes a JSON string. Most strings need no escape (serde_json
    /// escapes `"`, `\\` and control characters only) and are copied as they are.
    fn string(&mut self, text: &str) {
        use std::io::Write;
        if needs_escape(text.as_bytes()) {
            // A string always serializes; writing into the hash cannot fail.
            let _ = serde_json::to_writer(&mut *self, text);
        } else {
            self.byte(b'"');
            let _ = self.write(text.as_bytes());
            self.byte(b'"');
        }
    }

    fn flush_buffer(&mut self) {
        use sha2::Digest;
        self.hash.update(&self.buffer[..self.len]);
        self.len = 0;
    }
}

impl std::io::Write for HashWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if self.len + bytes.len() > self.buffer.len() {
            self.flush_buffer();
        }
        if bytes.len() > self.buffer.len() {
            use sha2::Digest;
            self.hash.update(bytes);
        } else {
            self.buffer[self.len..self.len + bytes.len()].copy_from_slice(bytes);
            self.len += bytes.len();
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Whether serde_json escapes anything in `text`: a control character, `"` or `\\`.
/// Eight bytes at a time, as the text of every object a rollout renders goes through it:
/// in each word, a byte below 0x20 leaves a borrow under its high bit when 0x20 is taken
/// from every byte, and a byte equal to `"` or `\\` is zero after an exclusive or with
/// it (the zero-byte test of "Bit Twiddling Hacks"). A borrow from one byte can mark the
/// next one as well, but only after a byte that is a match itself, so the answer for
/// the word is exact.
fn needs_escape(text: &[u8]) -> bool {
    const ONES: u64 = u64::from_le_bytes([0x01; 8]);
    const HIGH_BITS: u64 = u64::from_le_bytes([0x80; 8]);
    let below =
        |word: u64, limit: u8| word.wrapping_sub(ONES * u64::from(limit)) & !word & HIGH_BITS;
    let mut words = text.chunks_exact(8);
    for word in &mut words {
        let mut bytes = [0; 8];
        bytes.copy_from_slice(word);
        let word = u64::from_le_bytes(bytes);
        let control = below(word, 0x20);
        let quote = below(word ^ (ONES * u64::from(b'"')), 1);
        let backslash = below(word ^ (ONES * u64::from(b'\\')), 1);
        if control | quote | backslash != 0 {
            return true;
        }
    }
    words
        .remainder()
        .iter()
        .any(|&b| b < 0x20 || b == b'"' || b == b'\\')
}

/// The tags of [`Fingerprint`]'s encoding: one before every value says what follows.
mod tag {
    pub(super) const NULL: u8 = 0;
    pub(super) const FALSE: u8 = 1;
    pub(super) const TRUE: u8 = 2;
    pub(super) const UNSIGNED: u8 = 3;
    pub(super) const SIGNED: u8 = 4;
    pub(super) const FLOAT: u8 = 5;
    pub(super) const STRING: u8 = 6;
    pub(super) const LIST: u8 = 7;
    pub(super) const MAP: u8 = 8;
    pub(super) const ENTRY: u8 = 9;
    pub(super) const END: u8 = 10;
}

/// A 64-bit fingerprint of a JSON value, keyed by a seed drawn once per [`Fingerprints`]:
/// "is this the manifest I saw before?" at a fraction of the applied hash's cost.
///
/// The applied hash ([`canonical_hash`]) is written on objects, so it must be the same in
/// every process and every version of windlass, and it is a SHA-256 of escaped JSON. A
/// fingerprint is only ever compared with another from the same process (the memo of
/// `session::settled`), so it can be a fast keyed hash of an encoding that needs no
/// escaping: a tag before each value, the length before each string and list, an end mark
/// after each map's entries. Two values give the same stream only when they are equal, and
/// the random key leaves two different streams one chance in 2^64 of the same fingerprint,
/// which no input can aim at without the key.
pub(crate) struct Fingerprint(foldhash::quality::FoldHasher<'static>);

/// Makes [`Fingerprint`]s, all under one random key.
#[derive(Debug, Default)]
pub(crate) struct Fingerprints(foldhash::quality::RandomState);

impl Fingerprints {
    /// An empty fingerprint, to write a value into.
    pub(crate) fn start(&self) -> Fingerprint {
        use std::hash::BuildHasher;
        Fingerprint(self.0.build_hasher())
    }

    /// The fingerprint of `value`.
    #[cfg(test)]
    pub(crate) fn of(&self, value: &Value) -> u64 {
        let mut fingerprint = self.start();
        fingerprint.value(value);
        fingerprint.finish()
    }
}

impl Fingerprint {
    /// A whole value.
    pub(crate) fn value(&mut self, value: &Value) {
        use std::hash::Hasher;
        match value {
            Value::Null => self.0.write_u8(tag::NULL),
            Value::Bool(false) => self.0.write_u8(tag::FALSE),
            Value::Bool(true) => self.0.write_u8(tag::TRUE),
            Value::Number(number) => {
                if let Some(n) = number.as_u64() {
                    self.0.write_u8(tag::UNSIGNED);
                    self.0.write_u64(n);
                } else if let Some(n) = number.as_i64() {
                    self.0.write_u8(tag::SIGNED);
                    self.0.write_u64(n as u64);
                } else {
                    self.0.write_u8(tag::FLOAT);
                    self.0
                        .write_u64(number.as_f64().unwrap_or(f64::NAN).to_bits());
                }
            }
            Value::String(text) => self.string(text),
            Value::Array(items) => {
                self.list(items.len());
                for item in items {
                    self.value(item);
                }
            }
            Value::Object(map) => {
                self.map();
                for (key, value) in map {
                    self.key(key);
                    self.value(value);
                }
                self.end();
            }
        }
    }

    /// A string value.
    fn string(&mut self, text: &str) {
        use std::hash::Hasher;
        self.0.write_u8(tag::STRING);
        self.0.write_usize(text.len());
        self.0.write(text.as_bytes());
    }

    /// The start of a list of `len` values, which follow.
    pub(crate) fn list(&mut self, len: usize) {
        use std::hash::Hasher;
        self.0.write_u8(tag::LIST);
        self.0.write_usize(len);
    }

    /// The start of a map: then [`Fingerprint::key`] and the value of each entry, then
    /// [`Fingerprint::end`].
    pub(crate) fn map(&mut self) {
        use std::hash::Hasher;
        self.0.write_u8(tag::MAP);
    }

    /// The key of a map's entry, its value to follow.
    pub(crate) fn key(&mut self, key: &str) {
        use std::hash::Hasher;
        self.0.write_u8(tag::ENTRY);
        self.0.write_usize(key.len());
        self.0.write(key.as_bytes());
    }

    /// The end of a map's entries.
    pub(crate) fn end(&mut self) {
        use std::hash::Hasher;
        self.0.write_u8(tag::END);
    }

    /// The fingerprint of everything written.
    pub(crate) fn finish(&self) -> u64 {
        use std::hash::Hasher;
        self.0.finish()
    }
}

/// Whether serde_json's maps keep their keys sorted: they do unless a crate in the build
/// turns on its `preserve_order` feature. Asked once.
pub(crate) fn maps_are_sorted() -> bool {
    static SORTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SORTED.get_or_init(|| {
        let map: serde_json::Map<String, Value> = [("b", 1), ("a", 2)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), Value::from(v)))
            .collect();
        map.keys().is_sorted()
    })
}

/// `T` parsed from `value`; on failure, the path of the field that does not parse.
///
/// Parsed directly first: serde_path_to_error tracks the path by allocating every map key
/// it passes, and a reconcile parses its CR (status included) on every pass. Only a value
/// that does not parse is walked again, to say where.
pub(crate) fn parse_with_path<T: serde::de::DeserializeOwned>(
    value: &Value,
) -> Result<T, serde_path_to_error::Error<serde_json::Error>> {
    T::deserialize(value).or_else(|_| serde_path_to_error::deserialize(value))
}

/// Lower-case hexadecimal of bytes.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    out
}

/// Apply a JSON patch to `doc`, which the caller drops if this fails: every caller patches
/// a copy, so a failed patch leaves nothing to undo.
///
/// Not `json_patch::patch`: that one undoes a failed patch in place, and panics when the
/// undo itself fails (json-patch 4.2, e.g. `add` then a `move` to a missing parent), which
/// a temporary patch or a patch from a component could trigger.
pub(crate) fn apply_json_patch(
    doc: &mut Value,
    patch: &[json_patch::PatchOperation],
) -> Result<(), json_patch::PatchError> {
    json_patch::patch_unsafe(doc, patch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Values that differ only in where a string ends, which JSON type holds a scalar, or
    /// whether a level is a list or a map: each its own fingerprint.
    #[test]
    fn look_alike_values_have_their_own_fingerprints() {
        let fingerprints = Fingerprints::default();
        let values = [
            json!({"a": "bc"}),
            json!({"ab": "c"}),
            json!({"a": ["bc"]}),
            json!(["a", "bc"]),
            json!(["ab", "c"]),
            json!([["a"], "bc"]),
            json!({"a": {}}),
            json!({"a": []}),
            json!({"a": null}),
            json!({}),
            json!([]),
            json!(1),
            json!(-1),
            json!(1.0),
            json!("1"),
            json!(true),
            json!(null),
            json!({"a": {"b": 1}, "c": 2}),
            json!({"a": {"b": 1, "c": 2}}),
        ];
        let mut seen = std::collections::HashMap::new();
        for value in &values {
            if let Some(other) = seen.insert(fingerprints.of(value), value) {
                panic!("{value} and {other} share a fingerprint");
            }
        }
    }

    proptest::proptest! {
        /// Equal values have one fingerprint, however their maps were built; different
        /// values have different ones (one chance in 2^64 otherwise).
        #[test]
        fn fingerprints_tell_values_apart(
            a in crate::strategies::any_json(3, 4),
            b in crate::strategies::any_json(3, 4),
        ) {
            let fingerprints = Fingerprints::default();
            // Parsed again from its text (a float may not survive that; then it differs).
            let rebuilt: Value = serde_json::from_str(&a.to_string()).unwrap();
            proptest::prop_assert_eq!(fingerprints.of(&a) == fingerprints.of(&rebuilt), a == rebuilt);
            proptest::prop_assert_eq!(fingerprints.of(&a) == fingerprints.of(&b), a == b);
        }
    }

    #[test]
    fn merge_recurses_into_maps_and_replaces_lists() {
        let mut base = json!({"a": {"b": 1, "c": [1, 2]}, "d": "x"});
        merge(
            &mut base,
            json!({"a": {"c": [3], "e": true}, "d": {"now": "a map"}}),
        );
        assert_eq!(
            base,
            json!({"a": {"b": 1, "c": [3], "e": true}, "d": {"now": "a map"}})
        );
    }

    #[test]
    fn nested_get_and_set() {
        let mut v = json!({"a": {"b": 1}, "s": "str"});
        assert_eq!(nested_get(&v, "a.b"), Ok(Some(&json!(1))));
        assert_eq!(nested_get(&v, "a.x.y"), Ok(None));
        assert!(nested_get(&v, "s.x").is_err());
        nested_set(&mut v, "a.c.d", json!(2)).expect("settable");
        assert_eq!(v["a"]["c"]["d"], json!(2));
        assert!(nested_set(&mut v, "s.x", json!(1)).is_err());
    }

    #[test]
    fn canonical_hash_ignores_key_order_only() {
        let a: Value = serde_json::from_str(r#"{"a": 1, "b": {"x": [1, 2], "y": "s"}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"b": {"y": "s", "x": [1, 2]}, "a": 1}"#).unwrap();
        assert_eq!(canonical_hash(&a), canonical_hash(&b));
        let c: Value = serde_json::from_str(r#"{"b": {"y": "s", "x": [2, 1]}, "a": 1}"#).unwrap();
        assert_ne!(canonical_hash(&a), canonical_hash(&c));
        assert_eq!(canonical_hash(&a).len(), 64);
        // The JSON hashed is serde_json's, escapes included, long strings too.
        use sha2::{Digest, Sha256};
        let long = "x".repeat(700);
        for text in [
            "plain",
            "quote \" and \\ back",
            "tab\tnew\nline\u{1}",
            "ünïcode €",
            &long,
        ] {
            let value = json!({"b": text, "a": [1, 2.5, null, true, text]});
            let expected = hex(&Sha256::digest(serde_json::to_vec(&value).unwrap()));
            assert_eq!(canonical_hash(&value), expected, "{text}");
        }
    }

    proptest::proptest! {
        /// The escape test eight bytes at a time answers as the test of each byte.
        #[test]
        fn needs_escape_answers_as_each_byte(text in crate::strategies::any_text(40), at in 0usize..40, byte in 0u8..0x80) {
            let mut bytes = text.into_bytes();
            // A byte of any ASCII value somewhere, often near a word boundary.
            bytes.insert(at.min(bytes.len()), byte);
            let each = bytes.iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\');
            proptest::prop_assert_eq!(needs_escape(&bytes), each);
        }
    }

    #[test]
    fn prune_nulls_keeps_empty_containers() {
        let mut v = json!({"a": null, "b": {"c": null, "d": []}, "e": [{"f": null}], "g": {}});
        prune_nulls(&mut v);
        assert_eq!(v, json!({"b": {"d": []}, "e": [{}], "g": {}}));
    }

    /// A patch whose `move` fails after an `add` succeeded is an error, not a panic.
    #[test]
    fn a_json_patch_that_fails_half_way_is_an_error() {
        let mut doc = serde_json::json!({"kind": "ConfigMap", "data": {}});
        let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
            {"op": "add", "path": "/data/a", "value": null},
            {"op": "move", "from": "/data", "path": "/x/0"}
        ]))
        .unwrap();
        assert!(super::apply_json_patch(&mut doc, &patch).is_err());
    }
}
