// Stepstone steps in C: list your steps in STEPSTONE_STEPS and this module
// implements the `steps` world's exports (`describe`, `run-step`) over that
// table, on top of the bindings `wit-bindgen c --world steps` generates.
//
// A step reads its input (JSON text, not NUL-terminated) and writes its
// output (JSON text) with stepstone_write / stepstone_print, or fails with
// stepstone_fail. Buffers grow with malloc; the bindings free them after
// the host has copied the result.
#ifndef STEPSTONE_STEPS_H
#define STEPSTONE_STEPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
  const char *json;
  size_t len;
} stepstone_input;

typedef struct {
  char *data;
  size_t len;
  size_t cap;
  bool failed;
  bool permanent;
} stepstone_output;

typedef void (*stepstone_step_fn)(stepstone_input input, stepstone_output *out);

typedef struct {
  const char *name;
  stepstone_step_fn run;
} stepstone_step;

// The component's steps, ended by {NULL, NULL}: defined by the step author.
extern const stepstone_step STEPSTONE_STEPS[];

// Appends `len` bytes to the output.
void stepstone_write(stepstone_output *out, const char *bytes, size_t len);

// Appends a NUL-terminated string to the output.
void stepstone_print(stepstone_output *out, const char *text);

// Appends an unsigned number in decimal.
void stepstone_print_u64(stepstone_output *out, uint64_t number);

// Fails this attempt with `message` (replacing any output written). A
// permanent failure is not retried, whatever the caller's retry policy says.
void stepstone_fail(stepstone_output *out, const char *message, bool permanent);

// Which attempt this is, starting at 1.
uint32_t stepstone_attempt(void);

typedef enum { STEPSTONE_TRACE, STEPSTONE_DEBUG, STEPSTONE_INFO, STEPSTONE_WARN, STEPSTONE_ERROR } stepstone_level;

// Writes a NUL-terminated line to the run's log, attributed to this step.
void stepstone_log(stepstone_level level, const char *message);

#endif
