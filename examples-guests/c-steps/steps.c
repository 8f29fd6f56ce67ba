// Steps in C, for workflows in any language: a Rust workflow calls
// `c-steps/wrap` when the host links this component to its run as
// `c-steps`. The input is JSON text, so splicing it into an object gives
// JSON without parsing it.
#include "stepstone_steps.h"

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

const stepstone_step STEPSTONE_STEPS[] = {
    {"wrap", wrap},
    {"length", length},
    {NULL, NULL},
};
