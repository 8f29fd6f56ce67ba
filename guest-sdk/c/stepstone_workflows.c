// The `workflows` world's exports over STEPSTONE_WORKFLOWS, and the
// durable calls in C types. Built with the bindings of `wit-bindgen c
// --world workflows`.
#include "stepstone_workflows.h"

#include <string.h>

#include "workflows.h"

void stepstone_log(stepstone_level level, const char *message) {
  workflows_string_t text = {(uint8_t *)message, strlen(message)};
  stepstone_workflow_durable_log((stepstone_workflow_durable_log_level_t)level, &text);
}

// The WIT names of step-error-kind, by value.
static const char *const ERROR_KINDS[] = {
    "failed",  "fuel-exhausted", "timed-out", "memory-limit", "trapped", "output-too-large", "unknown-step",
    "cancelled", "invalid-output",
};

static void print_error(stepstone_output *out, const char *step, const stepstone_workflow_durable_step_error_t *error) {
  size_t kinds = sizeof ERROR_KINDS / sizeof *ERROR_KINDS;
  stepstone_fail(out, "step `", false);
  stepstone_print(out, step);
  stepstone_print(out, "` ");
  stepstone_print(out, error->kind < kinds ? ERROR_KINDS[error->kind] : "failed");
  stepstone_print(out, " after ");
  stepstone_print_u64(out, error->attempts);
  stepstone_print(out, error->attempts == 1 ? " attempt: " : " attempts: ");
  stepstone_write(out, (const char *)error->message.ptr, error->message.len);
}

static workflows_option_u32_t some_u32(uint32_t value) { return (workflows_option_u32_t){value != 0, value}; }

static workflows_option_u64_t some_u64(uint64_t value) { return (workflows_option_u64_t){value != 0, value}; }

void stepstone_append_to_stream(const char *name, stepstone_input value) {
  workflows_string_t stream = {(uint8_t *)name, strlen(name)};
  workflows_string_t payload = {(uint8_t *)value.json, value.len};
  stepstone_workflow_durable_append_to_stream(&stream, &payload);
}

bool stepstone_patched(const char *change_id) {
  workflows_string_t id = {(uint8_t *)change_id, strlen(change_id)};
  return stepstone_workflow_durable_patched(&id);
}

_Noreturn void stepstone_continue_as_new(stepstone_input input) {
  workflows_string_t payload = {(uint8_t *)input.json, input.len};
  stepstone_workflow_durable_continue_as_new(&payload);
  // The host trapped the call: control never comes back here.
  __builtin_trap();
}

bool stepstone_call_step(const char *step, stepstone_input input, const stepstone_step_options *options,
                         stepstone_output *result) {
  const stepstone_step_options defaults = {0};
  const stepstone_step_options *set = options ? options : &defaults;
  stepstone_workflow_durable_step_options_t policy = {
      .max_attempts = some_u32(set->max_attempts),
      .initial_backoff_ms = some_u64(set->initial_backoff_ms),
      .backoff_rate = {set->backoff_rate != 0, set->backoff_rate},
      .max_backoff_ms = some_u64(set->max_backoff_ms),
      .timeout_ms = some_u64(set->timeout_ms),
      .fuel = some_u64(set->fuel),
  };
  workflows_string_t name = {(uint8_t *)step, strlen(step)};
  workflows_string_t payload = {(uint8_t *)input.json, input.len};
  workflows_string_t output;
  stepstone_workflow_durable_step_error_t error;
  *result = (stepstone_output){0};
  if (!stepstone_workflow_durable_call_step(&name, &payload, &policy, &output, &error)) {
    print_error(result, step, &error);
    stepstone_workflow_durable_step_error_free(&error);
    return false;
  }
  *result = (stepstone_output){(char *)output.ptr, output.len, output.len, false, false};
  return true;
}

void exports_stepstone_workflow_describe_describe(exports_stepstone_workflow_describe_manifest_t *ret) {
  size_t count = stepstone_count(STEPSTONE_WORKFLOWS);
  workflows_string_t *names = stepstone_alloc(NULL, count * sizeof *names);
  for (size_t i = 0; i < count; i++) {
    workflows_string_dup(&names[i], STEPSTONE_WORKFLOWS[i].name);
  }
  ret->workflows = (workflows_list_string_t){names, count};
  ret->steps = (workflows_list_string_t){NULL, 0};
}

bool exports_stepstone_workflow_workflow_run(workflows_string_t *name, workflows_string_t *input,
                                             workflows_string_t *ret, workflows_string_t *err) {
  stepstone_output out = {0};
  stepstone_dispatch(STEPSTONE_WORKFLOWS, "workflow", (stepstone_input){(const char *)name->ptr, name->len},
                     (stepstone_input){(const char *)input->ptr, input->len}, &out);
  workflows_string_free(name);
  workflows_string_free(input);
  workflows_string_t text = {(uint8_t *)stepstone_alloc(out.data, out.len), out.len};
  if (out.failed) {
    *err = text;
    return false;
  }
  *ret = text;
  return true;
}
