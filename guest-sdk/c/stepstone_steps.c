// The `steps` world's exports over STEPSTONE_STEPS, and the output buffer
// the steps write to. Built with the bindings of `wit-bindgen c --world
// steps`; every string handed to the bindings is malloc'd, because their
// post-return functions free what an export returned.
#include "stepstone_steps.h"

#include <stdlib.h>
#include <string.h>

#include "steps.h"

// Out of memory in a step is a trap, reported by the host as `trapped`
// (or `memory-limit` when the limit refused the growth).
static void *grow(void *ptr, size_t size) {
  void *grown = realloc(ptr, size ? size : 1);
  if (!grown) {
    abort();
  }
  return grown;
}

void stepstone_write(stepstone_output *out, const char *bytes, size_t len) {
  if (out->len + len > out->cap) {
    out->cap = (out->len + len) * 2 + 16;
    out->data = grow(out->data, out->cap);
  }
  memcpy(out->data + out->len, bytes, len);
  out->len += len;
}

void stepstone_print(stepstone_output *out, const char *text) { stepstone_write(out, text, strlen(text)); }

void stepstone_print_u64(stepstone_output *out, uint64_t number) {
  char digits[20];
  size_t at = sizeof digits;
  do {
    digits[--at] = (char)('0' + number % 10);
    number /= 10;
  } while (number);
  stepstone_write(out, digits + at, sizeof digits - at);
}

void stepstone_fail(stepstone_output *out, const char *message, bool permanent) {
  out->len = 0;
  out->failed = true;
  out->permanent = permanent;
  stepstone_print(out, message);
}

uint32_t stepstone_attempt(void) { return stepstone_workflow_step_support_attempt(); }

void stepstone_log(stepstone_level level, const char *message) {
  steps_string_t text = {(uint8_t *)message, strlen(message)};
  stepstone_workflow_step_support_log((stepstone_workflow_step_support_log_level_t)level, &text);
}

static steps_string_t copied(const char *text) {
  size_t len = strlen(text);
  uint8_t *bytes = grow(NULL, len);
  memcpy(bytes, text, len);
  return (steps_string_t){bytes, len};
}

void exports_stepstone_workflow_describe_describe(exports_stepstone_workflow_describe_manifest_t *ret) {
  size_t count = 0;
  while (STEPSTONE_STEPS[count].name) {
    count++;
  }
  steps_string_t *names = grow(NULL, count * sizeof *names);
  for (size_t i = 0; i < count; i++) {
    names[i] = copied(STEPSTONE_STEPS[i].name);
  }
  ret->workflows = (steps_list_string_t){NULL, 0};
  ret->steps = (steps_list_string_t){names, count};
}

static const stepstone_step *find(const steps_string_t *name) {
  for (const stepstone_step *step = STEPSTONE_STEPS; step->name; step++) {
    if (strlen(step->name) == name->len && memcmp(step->name, name->ptr, name->len) == 0) {
      return step;
    }
  }
  return NULL;
}

bool exports_stepstone_workflow_step_run_step(steps_string_t *name, steps_string_t *input, steps_string_t *ret,
                                              exports_stepstone_workflow_step_step_failure_t *err) {
  stepstone_output out = {0};
  const stepstone_step *step = find(name);
  if (step) {
    step->run((stepstone_input){(const char *)input->ptr, input->len}, &out);
  } else {
    stepstone_fail(&out, "unknown step `", true);
    stepstone_write(&out, (const char *)name->ptr, name->len);
    stepstone_print(&out, "`");
  }
  steps_string_free(name);
  steps_string_free(input);
  steps_string_t text = {(uint8_t *)grow(out.data, out.len), out.len};
  if (out.failed) {
    err->message = text;
    err->permanent = out.permanent;
    return false;
  }
  *ret = text;
  return true;
}
