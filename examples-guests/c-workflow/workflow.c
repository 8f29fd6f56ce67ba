// A workflow in C calling a step in Rust: `greet` calls step
// `make-greeting` of the component the host links to the run as `hello`
// (examples-guests/hello). Payloads are JSON text, so the workflow picks
// the greeting out of the step's output and splices it into its own.
#include "stepstone_workflows.h"

// {"name": "Ada"} -> {"greeting": "Hello, Ada!", "via": "c"}.
static void greet(stepstone_input person, stepstone_output *out) {
  const stepstone_step_options retry = {.max_attempts = 3};
  stepstone_output made;
  if (!stepstone_call_step("hello/make-greeting", person, &retry, &made)) {
    *out = made;
    return;
  }
  stepstone_input greeting = stepstone_field(stepstone_written(&made), "greeting");
  if (greeting.json) {
    stepstone_print(out, "{\"greeting\":");
    stepstone_write(out, greeting.json, greeting.len);
    stepstone_print(out, ",\"via\":\"c\"}");
  } else {
    stepstone_fail(out, "hello/make-greeting answered no `greeting`", false);
  }
  stepstone_output_free(&made);
}

const stepstone_workflow STEPSTONE_WORKFLOWS[] = {
    {"greet", greet},
    {NULL, NULL},
};
