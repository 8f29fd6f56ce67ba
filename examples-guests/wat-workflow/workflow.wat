;; A workflow written by hand in WebAssembly text: the core module of the
;; `workflows` world; `stepstone componentize workflow.wat --world workflows`
;; embeds the world and makes it a component.
;;
;; Workflow `relay` calls step `wat-step/wrap` (the step written in WAT, in
;; a component of its own) with its input and returns the step's output; a
;; failed step fails the workflow with the step's message.
(module
  ;; call-step(step: string, input: string, options: step-options)
  ;;   -> result<payload, step-error>
  ;; Flattened: two strings, then the six optional fields of step-options
  ;; (each a present-flag and a value), then where to write the result.
  (import "stepstone:workflow/durable@0.1.0" "call-step"
    (func $call_step
      (param i32 i32 i32 i32)
      (param i32 i32) (param i32 i64) (param i32 f64)
      (param i32 i64) (param i32 i64) (param i32 i64)
      (param i32)))

  (memory (export "memory") 1)

  (data (i32.const 16) "relay")
  ;; The manifest's workflows list: one string (ptr 16, len 5).
  (data (i32.const 24) "\10\00\00\00\05\00\00\00")
  ;; The manifest: workflows = the list at 24 (len 1), steps = empty.
  (data (i32.const 32) "\18\00\00\00\01\00\00\00\00\00\00\00\00\00\00\00")
  (data (i32.const 48) "wat-step/wrap")

  (global $MANIFEST i32 (i32.const 32))
  ;; Where call-step writes result<payload, step-error> (20 bytes): case
  ;; byte at 0; ok: payload ptr/len at 4/8; err: kind at 4, message
  ;; ptr/len at 8/12, attempts at 16.
  (global $STEP_RESULT i32 (i32.const 64))
  ;; What `run` returns, result<payload, string>: case byte at 0, ptr/len at 4/8.
  (global $RESULT i32 (i32.const 96))
  (global $heap (mut i32) (i32.const 1024))

  ;; A bump allocator: the instance lives for one execution of the run.
  (func (export "cabi_realloc")
    (param $old i32) (param $old_size i32) (param $align i32) (param $new_size i32)
    (result i32)
    (local $ptr i32)
    (local $end i32)
    (local.set $ptr
      (i32.and
        (i32.add (global.get $heap) (i32.sub (local.get $align) (i32.const 1)))
        (i32.sub (i32.const 0) (local.get $align))))
    (local.set $end (i32.add (local.get $ptr) (local.get $new_size)))
    (if (i32.gt_u (local.get $end) (i32.shl (memory.size) (i32.const 16)))
      (then
        (if (i32.eq
              (memory.grow
                (i32.shr_u
                  (i32.add
                    (i32.sub (local.get $end) (i32.shl (memory.size) (i32.const 16)))
                    (i32.const 65535))
                  (i32.const 16)))
              (i32.const -1))
          (then unreachable))))
    (global.set $heap (local.get $end))
    (memory.copy
      (local.get $ptr)
      (local.get $old)
      (select (local.get $old_size) (local.get $new_size)
        (i32.lt_u (local.get $old_size) (local.get $new_size))))
    (local.get $ptr))

  (func (export "stepstone:workflow/workflow@0.1.0#run")
    (param $name i32) (param $name_len i32) (param $input i32) (param $input_len i32)
    (result i32)
    ;; Every option unset: the host's defaults.
    (call $call_step
      (i32.const 48) (i32.const 13)
      (local.get $input) (local.get $input_len)
      (i32.const 0) (i32.const 0) (i32.const 0) (i64.const 0) (i32.const 0) (f64.const 0)
      (i32.const 0) (i64.const 0) (i32.const 0) (i64.const 0) (i32.const 0) (i64.const 0)
      (global.get $STEP_RESULT))
    (if (i32.eqz (i32.load8_u (global.get $STEP_RESULT)))
      (then
        ;; ok: the step's output is the workflow's.
        (i32.store8 (global.get $RESULT) (i32.const 0))
        (i32.store offset=4 (global.get $RESULT) (i32.load offset=4 (global.get $STEP_RESULT)))
        (i32.store offset=8 (global.get $RESULT) (i32.load offset=8 (global.get $STEP_RESULT))))
      (else
        ;; err: the step's message is the workflow's error.
        (i32.store8 (global.get $RESULT) (i32.const 1))
        (i32.store offset=4 (global.get $RESULT) (i32.load offset=8 (global.get $STEP_RESULT)))
        (i32.store offset=8 (global.get $RESULT) (i32.load offset=12 (global.get $STEP_RESULT)))))
    (global.get $RESULT))

  (func (export "stepstone:workflow/describe@0.1.0#describe") (result i32)
    (global.get $MANIFEST)))
