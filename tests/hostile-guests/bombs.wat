;; Bombs written by hand, so each does exactly one thing: grow a table or
;; the linear memory until the host refuses, then trap; or return an output
;; that is not JSON (which no SDK would let a guest do). Each is exported as
;; a step and as a workflow of the same name (the `workflows-and-steps`
;; world): `table-bomb`, `memory-bomb` and `not-json`.
;;
;; `stepstone componentize bombs.wat --world workflows-and-steps` embeds the
;; world and makes it a component.
(module
  (memory (export "memory") 1)
  (table $bomb 1 funcref)

  ;; Static data: the three names, the list of them, the manifest.
  (data (i32.const 16) "table-bomb")
  (data (i32.const 32) "memory-bomb")
  (data (i32.const 80) "not-json")
  ;; list<string>: ("table-bomb" at 16, len 10), ("memory-bomb" at 32, len 11),
  ;; ("not-json" at 80, len 8).
  (data (i32.const 48) "\10\00\00\00\0a\00\00\00\20\00\00\00\0b\00\00\00\50\00\00\00\08\00\00\00")
  ;; not-json's output, 21 bytes, and its result: ok (0), the text at 96.
  (data (i32.const 96) "plain words, not JSON")
  (data (i32.const 128) "\00\00\00\00\60\00\00\00\15\00\00\00")
  ;; manifest: workflows = the list at 48 (len 3), steps = the same list.
  (data (i32.const 200) "\30\00\00\00\03\00\00\00\30\00\00\00\03\00\00\00")

  (global $MANIFEST i32 (i32.const 200))
  (global $NOT_JSON_RESULT i32 (i32.const 128))

  ;; Nothing is ever returned, so the host's strings are the only
  ;; allocations: a bump allocator above the static data is enough.
  (global $heap (mut i32) (i32.const 1024))
  (func (export "cabi_realloc")
    (param $old i32) (param $old_size i32) (param $align i32) (param $new_size i32)
    (result i32)
    (local $ptr i32)
    (local.set $ptr
      (i32.and
        (i32.add (global.get $heap) (i32.sub (local.get $align) (i32.const 1)))
        (i32.sub (i32.const 0) (local.get $align))))
    (global.set $heap (i32.add (local.get $ptr) (local.get $new_size)))
    (if (i32.gt_u (global.get $heap) (i32.shl (memory.size) (i32.const 16)))
      (then unreachable))
    (local.get $ptr))

  ;; Adds 1000 table elements at a time until refused, then traps.
  (func $table_bomb
    (loop $grow
      (br_if $grow
        (i32.ne (table.grow $bomb (ref.null func) (i32.const 1000)) (i32.const -1))))
    unreachable)

  ;; Adds 1 MiB of memory at a time until refused, then traps.
  (func $memory_bomb
    (loop $grow
      (br_if $grow (i32.ne (memory.grow (i32.const 16)) (i32.const -1))))
    unreachable)

  ;; Names differ in length: "not-json" 8, "table-bomb" 10, "memory-bomb" 11.
  (func $detonate (param $name_len i32) (result i32)
    (if (i32.eq (local.get $name_len) (i32.const 8))
      (then (return (global.get $NOT_JSON_RESULT))))
    (if (i32.eq (local.get $name_len) (i32.const 10))
      (then (call $table_bomb))
      (else (call $memory_bomb)))
    unreachable)

  (func (export "stepstone:workflow/step@0.1.0#run-step")
    (param $name i32) (param $name_len i32) (param $input i32) (param $input_len i32)
    (result i32)
    (call $detonate (local.get $name_len)))

  (func (export "stepstone:workflow/workflow@0.1.0#run")
    (param $name i32) (param $name_len i32) (param $input i32) (param $input_len i32)
    (result i32)
    (call $detonate (local.get $name_len)))

  (func (export "stepstone:workflow/describe@0.1.0#describe") (result i32)
    (global.get $MANIFEST)))
