// Steps in C, for workflows in any language: a Rust workflow calls
// `c-steps/wrap` when the host links this component to its run as
// `c-steps`. The input is JSON text, so splicing it into an object gives
// JSON without parsing it.
#include "stepstone_steps.h"

#include <stdlib.h>

// Any JSON value -> {"from":"c","value":<value>}.
static void wrap(stepstone_input input, stepstone_output *out) {
  stepstone_log(STEPSTONE_INFO, "wrapping");
  stepstone_print(out, "{\"from\":\"c\",\"value\":");
  stepstone_write(out, input.json, input.len);
  stepstone_print(out, "}");
}

// Any JSON value -> {"bytes":<length of its JSON text>}.
static void length(stepstone_input input, stepstone_output *out) {
  stepstone_print(out, "{\"bytes\":");
  stepstone_print_u64(out, input.len);
  stepstone_print(out, "}");
}

// Anything -> {"idempotency_key":"...","fencing_token":N}: which call this
// attempt serves, as a service would be told (the key holds no character
// JSON escapes: tenant and run ids do not).
static void key(stepstone_input input, stepstone_output *out) {
  (void)input;
  char *key = stepstone_idempotency_key();
  stepstone_print(out, "{\"idempotency_key\":\"");
  stepstone_print(out, key);
  stepstone_print(out, "\",\"fencing_token\":");
  stepstone_print_u64(out, stepstone_fencing_token());
  stepstone_print(out, "}");
  free(key);
}

const stepstone_step STEPSTONE_STEPS[] = {
    {"wrap", wrap},
    {"length", length},
    {"key", key},
    {NULL, NULL},
};
