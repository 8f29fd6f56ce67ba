// A workflow in C calling a step in Rust: `greet` calls step
// `make-greeting` of the component the host links to the run as `hello`
// (examples-guests/hello). Payloads are JSON text, so the workflow picks
// the greeting out of the step's output and splices it into its own.
// `greet-again` is `greet` changed behind a patch marker; `countdown`
// loops by continuing as new; `progress` streams its count.
#include <stdlib.h>
#include <string.h>

#include "stepstone_workflows.h"

// Calls `hello/make-greeting` on `person` and writes `prefix`, then the
// greeting it made (JSON text), to `out`. Returns false with `out` failed
// if the step failed or answered no greeting.
static bool print_greeting(stepstone_input person, const char *prefix, stepstone_output *out) {
  const stepstone_step_options retry = {.max_attempts = 3};
  stepstone_output made;
  if (!stepstone_call_step("hello/make-greeting", person, &retry, &made)) {
    stepstone_output_free(out);
    *out = made;
    return false;
  }
  stepstone_input greeting = stepstone_field(stepstone_written(&made), "greeting");
  if (greeting.json) {
    stepstone_print(out, prefix);
    stepstone_write(out, greeting.json, greeting.len);
  } else {
    stepstone_fail(out, "hello/make-greeting answered no `greeting`", false);
  }
  stepstone_output_free(&made);
  return greeting.json != NULL;
}

// {"name": "Ada"} -> {"greeting": "Hello, Ada!", "via": "c"}.
static void greet(stepstone_input person, stepstone_output *out) {
  if (print_greeting(person, "{\"greeting\":", out)) {
    stepstone_print(out, ",\"via\":\"c\"}");
  }
}

// `greet`, changed while runs of it were under way to greet twice, behind
// the patch marker `greet-again`: a run recorded before the change replays
// as `greet` ran; a new run journals the marker and greets again.
static void greet_again(stepstone_input person, stepstone_output *out) {
  if (!print_greeting(person, "{\"greeting\":", out)) {
    return;
  }
  if (stepstone_patched("greet-again") && !print_greeting(person, ",\"again\":", out)) {
    return;
  }
  stepstone_print(out, ",\"via\":\"c\"}");
}

// Reads `n` as a whole number into `*number`; false if it is none.
static bool whole_number(stepstone_input n, unsigned long long *number) {
  char digits[24] = {0};
  char *end = NULL;
  if (n.len > 0 && n.len < sizeof digits) {
    memcpy(digits, n.json, n.len);
    *number = strtoull(digits, &end, 10);
  }
  return end != NULL && end != digits && *end == '\0';
}

// 3 -> {"done":true,"via":"c"}, one generation per number: each continues
// as new on the number below its own.
static void countdown(stepstone_input n, stepstone_output *out) {
  unsigned long long left = 0;
  if (!whole_number(n, &left)) {
    stepstone_fail(out, "countdown takes a whole number", false);
    return;
  }
  if (left == 0) {
    stepstone_print(out, "{\"done\":true,\"via\":\"c\"}");
    return;
  }
  stepstone_output next = {0};
  stepstone_print_u64(&next, left - 1);
  stepstone_continue_as_new(stepstone_written(&next));
}

// 3 -> {"streamed":3,"via":"c"}, having appended {"done":1}, {"done":2}
// and {"done":3} to the run's stream `progress`.
static void progress(stepstone_input n, stepstone_output *out) {
  unsigned long long count = 0;
  if (!whole_number(n, &count)) {
    stepstone_fail(out, "progress takes a whole number", false);
    return;
  }
  for (unsigned long long done = 1; done <= count; done++) {
    stepstone_output value = {0};
    stepstone_print(&value, "{\"done\":");
    stepstone_print_u64(&value, done);
    stepstone_print(&value, "}");
    stepstone_append_to_stream("progress", stepstone_written(&value));
    stepstone_output_free(&value);
  }
  stepstone_print(out, "{\"streamed\":");
  stepstone_print_u64(out, count);
  stepstone_print(out, ",\"via\":\"c\"}");
}

const stepstone_workflow STEPSTONE_WORKFLOWS[] = {
    {"greet", greet},
    {"greet-again", greet_again},
    {"countdown", countdown},
    {"progress", progress},
    {NULL, NULL},
};
