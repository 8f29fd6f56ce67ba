// Stepstone steps in C: list your steps in STEPSTONE_STEPS and this module
// implements the `steps` world's exports (`describe`, `run-step`) over that
// table, on top of the bindings `wit-bindgen c --world steps` generates.
//
// A step reads its input (JSON text, not NUL-terminated) and writes its
// output (JSON text) with stepstone_write / stepstone_print, or fails with
// stepstone_fail (all in stepstone_guest.h).
#ifndef STEPSTONE_STEPS_H
#define STEPSTONE_STEPS_H

#include "stepstone_guest.h"

typedef stepstone_fn stepstone_step_fn;
typedef stepstone_export stepstone_step;

// The component's steps, ended by {NULL, NULL}: defined by the step author.
extern const stepstone_step STEPSTONE_STEPS[];

// Which attempt this is, starting at 1.
uint32_t stepstone_attempt(void);

// A number that only rises as the run passes from host to host: send it
// with the call's idempotency key (say as `Fencing-Token`) to a service
// that keeps the highest it saw for each key and refuses a lower one.
uint64_t stepstone_fencing_token(void);

#endif
