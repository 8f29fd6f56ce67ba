// {{name}}'s step `make-greeting`: {"name": "Ada"} -> "Hello, Ada!".
//
// A step may do anything: it runs in a sandbox of its own, and its result
// is recorded once. An ordinary failure is retried as the caller asked; a
// permanent one is not.
#include "stepstone_steps.h"

static void make_greeting(stepstone_input input, stepstone_output *out) {
  stepstone_input name = stepstone_field(input, "name");
  // A JSON string of at least one character: its text between the quotes,
  // escapes and all, is the inside of another JSON string as it is.
  if (!name.json || name.len < 3 || name.json[0] != '"' || name.json[name.len - 1] != '"') {
    stepstone_fail(out, "no name to greet", true);
    return;
  }
  stepstone_log(STEPSTONE_INFO, "greeting someone");
  stepstone_print(out, "\"Hello, ");
  stepstone_write(out, name.json + 1, name.len - 2);
  stepstone_print(out, "!\"");
}

const stepstone_step STEPSTONE_STEPS[] = {
    {"make-greeting", make_greeting},
    {NULL, NULL},
};
