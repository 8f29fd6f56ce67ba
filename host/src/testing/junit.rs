//! Scenario results as JUnit XML, the report CI systems read: a test case
//! per scenario run (one per completion order when shuffled), failed with
//! its mismatches, or in error when the scenario could not run at all.

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

use super::ScenarioReport;

/// One scenario run, as the report lists it.
pub struct JunitCase<'a> {
    /// The file the scenario came from, or its component: its test class.
    pub source: &'a str,
    /// The scenario's report, or why it could not run.
    pub result: Result<&'a ScenarioReport, (&'a str, String)>,
}

/// The XML of a report with one suite, `suite`, of `cases`.
pub fn render(suite: &str, cases: &[JunitCase<'_>]) -> Result<String, quick_junit::SerializeError> {
    let mut tests = TestSuite::new(suite);
    for case in cases {
        tests.add_test_case(test_case(case));
    }
    let mut report = Report::new("stepstone test");
    report.add_test_suite(tests);
    report.to_string()
}

fn test_case(case: &JunitCase<'_>) -> TestCase {
    let (name, status, time, out) = match &case.result {
        Ok(report) => {
            let status = match report.passed() {
                true => TestCaseStatus::success(),
                false => {
                    let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
                    status
                        .set_message(report.failures.first().cloned().unwrap_or_default())
                        .set_description(report.failures.join("\n"));
                    status
                }
            };
            (report.title(), status, report.real_elapsed, Some(report.to_string()))
        }
        Err((name, error)) => {
            let mut status = TestCaseStatus::non_success(NonSuccessKind::Error);
            status.set_message(error.clone());
            ((*name).to_owned(), status, std::time::Duration::ZERO, None)
        }
    };
    let mut test = TestCase::new(name, status);
    test.set_classname(case.source).set_time(time);
    if let Some(out) = out {
        test.set_system_out(out);
    }
    test
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Scenario;

    #[test]
    fn passes_failures_and_errors_are_each_their_own_case() {
        let mut passed = ScenarioReport::new(&Scenario::new("w", serde_json::Value::Null).named("good"), None);
        passed.real_elapsed = std::time::Duration::from_millis(12);
        let mut failed = ScenarioReport::new(&Scenario::new("w", serde_json::Value::Null).named("bad <one>"), Some(2));
        failed.failures = vec!["expected the output 1, got 2".into(), "another".into()];
        let xml = render(
            "order.wasm",
            &[
                JunitCase {
                    source: "a.toml",
                    result: Ok(&passed),
                },
                JunitCase {
                    source: "b.toml",
                    result: Ok(&failed),
                },
                JunitCase {
                    source: "c.toml",
                    result: Err(("c", "no such file".into())),
                },
            ],
        )
        .expect("serializes");
        assert!(
            xml.contains(r#"tests="3" skipped="0" errors="1" failures="1""#),
            "{xml}"
        );
        assert!(
            xml.contains(r#"<testcase name="good" classname="a.toml" time="0.012">"#),
            "{xml}"
        );
        assert!(xml.contains("bad &lt;one&gt; (completions shuffled, seed 2)"), "{xml}");
        assert!(
            xml.contains(r#"<failure message="expected the output 1, got 2""#),
            "{xml}"
        );
        assert!(xml.contains(r#"<error message="no such file""#), "{xml}");
    }
}
