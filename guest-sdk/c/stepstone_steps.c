// The `steps` world's exports over STEPSTONE_STEPS, and the step's log.
// Built with the bindings of `wit-bindgen c --world steps`.
#include "stepstone_steps.h"

#include <string.h>

#include "steps.h"

uint32_t stepstone_attempt(void) { return stepstone_workflow_step_support_attempt(); }

uint64_t stepstone_fencing_token(void) { return stepstone_workflow_step_support_fencing_token(); }

char *stepstone_idempotency_key(void) {
  stepstone_workflow_step_support_step_context_t context;
  stepstone_workflow_step_support_context(&context);
  size_t len = context.idempotency_key.len;
  char *key = stepstone_alloc(NULL, len + 1);
  memcpy(key, context.idempotency_key.ptr, len);
  key[len] = '\0';
  stepstone_workflow_step_support_step_context_free(&context);
  return key;
}

void stepstone_log(stepstone_level level, const char *message) {
  steps_string_t text = {(uint8_t *)message, strlen(message)};
  stepstone_workflow_step_support_log((stepstone_workflow_step_support_log_level_t)level, &text);
}

void exports_stepstone_workflow_describe_describe(exports_stepstone_workflow_describe_manifest_t *ret) {
  size_t count = stepstone_count(STEPSTONE_STEPS);
  steps_string_t *names = stepstone_alloc(NULL, count * sizeof *names);
  for (size_t i = 0; i < count; i++) {
    steps_string_dup(&names[i], STEPSTONE_STEPS[i].name);
  }
  ret->workflows = (steps_list_string_t){NULL, 0};
  ret->steps = (steps_list_string_t){names, count};
}

bool exports_stepstone_workflow_step_run_step(steps_string_t *name, steps_string_t *input, steps_string_t *ret,
                                              exports_stepstone_workflow_step_step_failure_t *err) {
  stepstone_output out = {0};
  stepstone_dispatch(STEPSTONE_STEPS, "step", (stepstone_input){(const char *)name->ptr, name->len},
                     (stepstone_input){(const char *)input->ptr, input->len}, &out);
  steps_string_free(name);
  steps_string_free(input);
  steps_string_t text = {(uint8_t *)stepstone_alloc(out.data, out.len), out.len};
  if (out.failed) {
    err->message = text;
    err->permanent = out.permanent;
    return false;
  }
  *ret = text;
  return true;
}
