// {{name}}'s workflow `greet`: calls the step `make-greeting` of the
// component linked to the run as `steps`, retried up to three times, and
// returns {"greeting": ...}, the greeting it made.
//
// A workflow reaches the world only through the host's durable calls: the
// host journals each call, and after a crash runs the workflow again from
// the start, answering the calls it made from the journal.
#include "stepstone_workflows.h"

static void greet(stepstone_input input, stepstone_output *out) {
  const stepstone_step_options retry = {.max_attempts = 3, .initial_backoff_ms = 100};
  stepstone_output greeting;
  if (!stepstone_call_step("steps/make-greeting", input, &retry, &greeting)) {
    *out = greeting; // the step's failure fails the run
    return;
  }
  stepstone_print(out, "{\"greeting\":");
  stepstone_write(out, greeting.data, greeting.len);
  stepstone_print(out, "}");
  stepstone_output_free(&greeting);
}

const stepstone_workflow STEPSTONE_WORKFLOWS[] = {
    {"greet", greet},
    {NULL, NULL},
};
