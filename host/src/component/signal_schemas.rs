//! The JSON Schemas a component declares for the signals its workflows
//! await: a custom section `stepstone:signal-schemas` holding one JSON
//! object, signal name → schema, which `stepstone signal-schemas` writes
//! into any component, whatever language it was built from.
//!
//! Invariant: every schema is compiled when the component is validated, so
//! a component with a schema that does not compile is refused at upload,
//! and a send only runs a compiled validator. No schema reaches anything
//! outside itself: `$ref`s to files or URLs are not fetched (the
//! validator is built without retrievers), and formats are not asserted.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

/// The custom section's name.
pub const SECTION: &str = "stepstone:signal-schemas";
/// The largest section taken, and the most signals it may name.
pub const MAX_SECTION_BYTES: usize = 256 << 10;
/// The most signals one section may name.
pub const MAX_SCHEMAS: usize = 100;

/// The compiled schemas of one component, by signal name.
#[derive(Default)]
pub struct SignalSchemas(BTreeMap<String, (Value, jsonschema::Validator)>);

impl fmt::Debug for SignalSchemas {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.keys()).finish()
    }
}

impl SignalSchemas {
    /// Reads and compiles the section's text; the error says what is wrong.
    pub fn parse(section: &[u8]) -> Result<Self, String> {
        if section.len() > MAX_SECTION_BYTES {
            return Err(format!(
                "the section is {} bytes, over {MAX_SECTION_BYTES}",
                section.len()
            ));
        }
        let declared: BTreeMap<String, Value> = serde_json::from_slice(section)
            .map_err(|e| format!("it is not a JSON object of signal name to schema: {e}"))?;
        if declared.len() > MAX_SCHEMAS {
            return Err(format!("it names {} signals, over {MAX_SCHEMAS}", declared.len()));
        }
        let mut schemas = BTreeMap::new();
        for (name, schema) in declared {
            let validator = jsonschema::options()
                .should_validate_formats(false)
                .build(&schema)
                .map_err(|e| format!("the schema of signal `{name}` does not compile: {e}"))?;
            schemas.insert(name, (schema, validator));
        }
        Ok(Self(schemas))
    }

    /// The signals with a schema, and their schemas.
    pub fn declared(&self) -> BTreeMap<String, Value> {
        self.0
            .iter()
            .map(|(name, (schema, _))| (name.clone(), schema.clone()))
            .collect()
    }

    /// Checks `payload` (JSON text) for signal `name`: a signal without a
    /// schema takes any JSON. The error names the failing path.
    pub fn check(&self, name: &str, payload: &str) -> Result<(), String> {
        let Some((_, validator)) = self.0.get(name) else {
            return Ok(());
        };
        let payload: Value = serde_json::from_str(payload).map_err(|e| format!("not JSON: {e}"))?;
        validator.validate(&payload).map_err(|error| {
            let path = error.instance_path().to_string();
            let at = if path.is_empty() {
                "the payload".to_owned()
            } else {
                format!("`{path}`")
            };
            format!("at {at}: {error}")
        })
    }
}

/// `component` with `schemas` (the section's JSON text, checked first)
/// appended as its custom section, which may come anywhere in a component.
pub fn embed(component: &[u8], schemas: &[u8]) -> Result<Vec<u8>, String> {
    SignalSchemas::parse(schemas)?;
    if section_in(component)?.is_some() {
        return Err(format!("the component already has a `{SECTION}` section"));
    }
    let mut embedded = component.to_vec();
    let section = wasm_encoder::CustomSection {
        name: SECTION.into(),
        data: schemas.into(),
    };
    wasm_encoder::ComponentSection::append_to_component(&section, &mut embedded);
    Ok(embedded)
}

/// The component's `stepstone:signal-schemas` section, at any depth.
pub fn section_in(component: &[u8]) -> Result<Option<&[u8]>, String> {
    let mut found = None;
    for payload in wasmparser::Parser::new(0).parse_all(component) {
        if let wasmparser::Payload::CustomSection(section) = payload.map_err(|e| e.to_string())?
            && section.name() == SECTION
        {
            if found.is_some() {
                return Err(format!("it has two `{SECTION}` sections"));
            }
            found = Some(section.data());
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn approval() -> SignalSchemas {
        let text = br#"{"approve": {"type": "object", "required": ["by"],
            "properties": {"by": {"type": "string", "maxLength": 8}}}}"#;
        SignalSchemas::parse(text).expect("a valid section")
    }

    #[test]
    fn a_payload_is_checked_against_its_signals_schema_naming_the_path() {
        let schemas = approval();
        assert_eq!(schemas.check("approve", r#"{"by": "ops"}"#), Ok(()));
        let error = schemas.check("approve", r#"{"by": 7}"#).unwrap_err();
        assert!(error.starts_with("at `/by`:") && error.contains("string"), "{error}");
        let error = schemas.check("approve", "{}").unwrap_err();
        assert!(error.starts_with("at the payload:") && error.contains("by"), "{error}");
        assert_eq!(
            schemas.check("other", "[1, 2]"),
            Ok(()),
            "an undeclared signal takes any JSON"
        );
    }

    #[test]
    fn bad_sections_are_refused_saying_why() {
        for (section, says) in [
            (&b"[1]"[..], "not a JSON object"),
            (br#"{"a": {"type": "nonsense"}}"#, "signal `a` does not compile"),
            (
                br#"{"a": {"$ref": "https://example.com/s.json"}}"#,
                "signal `a` does not compile",
            ),
        ] {
            let error = SignalSchemas::parse(section).unwrap_err();
            assert!(error.contains(says), "{}: {error}", String::from_utf8_lossy(section));
        }
        let signals = |count: usize| -> Vec<u8> {
            let map: BTreeMap<String, Value> = (0..count).map(|n| (format!("s{n}"), Value::Bool(true))).collect();
            serde_json::to_vec(&map).expect("JSON")
        };
        assert!(
            SignalSchemas::parse(&signals(MAX_SCHEMAS)).is_ok(),
            "100 signals are taken"
        );
        let mut padded = vec![b' '; MAX_SECTION_BYTES - 2];
        padded.extend_from_slice(b"{}");
        assert!(
            SignalSchemas::parse(&padded).is_ok(),
            "a section of exactly 256 KiB is taken"
        );
        let many = signals(MAX_SCHEMAS + 1);
        let error = SignalSchemas::parse(&many).unwrap_err();
        assert!(error.contains("101 signals"), "{error}");
        let error = SignalSchemas::parse(&vec![b' '; MAX_SECTION_BYTES + 1]).unwrap_err();
        assert!(error.contains("over 262144"), "{error}");
    }

    /// Patterns that backtrack without end in a naive engine: the regex
    /// engines behind the validator answer them (one is linear, the other
    /// has a backtracking limit), so a hostile schema cannot hang a send.
    #[test]
    fn catastrophic_patterns_end() {
        let text =
            br#"{"a": {"type": "string", "pattern": "^(a+)+$"}, "b": {"type": "string", "pattern": "^(a+)+\\1$"}}"#;
        let schemas = SignalSchemas::parse(text).expect("a valid section");
        let payload = serde_json::to_string(&format!("{}!", "a".repeat(10_000))).expect("JSON");
        assert!(schemas.check("a", &payload).is_err());
        assert!(schemas.check("b", &payload).is_err());
    }

    #[test]
    fn a_section_embedded_is_found_again_and_only_once() {
        let component = wat::parse_str("(component)").expect("a component");
        let schemas = br#"{"go": true}"#;
        let embedded = embed(&component, schemas).expect("embedded");
        assert_eq!(section_in(&embedded), Ok(Some(&schemas[..])));
        assert!(embed(&embedded, schemas).unwrap_err().contains("already has"));
        assert!(
            embed(&component, b"{").is_err(),
            "a section is checked before it is written"
        );
    }
}
