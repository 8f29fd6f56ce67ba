;; A step component written by hand in WebAssembly text, to show a guest
;; needs no SDK: only the canonical ABI of the `steps` world. This is the
;; core module; `stepstone componentize step.wat --world steps` embeds the
;; world and makes it a component.
;;
;; Step `wrap` answers `{"from":"wat","value":<input>}`. The input is JSON
;; text, so splicing it between a prefix and a closing brace gives JSON.
;; Any other name fails permanently, with a message naming it.
(module
  (memory (export "memory") 1)

  ;; Static data. Addresses below 1024; the heap starts at 1024.
  (data (i32.const 16) "wrap")
  ;; The manifest's steps list: one string (ptr 16, len 4).
  (data (i32.const 24) "\10\00\00\00\04\00\00\00")
  ;; The manifest record: workflows = empty list (ptr 0, len 0),
  ;; steps = the list at 24 (ptr 24, len 1).
  (data (i32.const 32) "\00\00\00\00\00\00\00\00\18\00\00\00\01\00\00\00")
  (data (i32.const 64) "{\"from\":\"wat\",\"value\":")
  (data (i32.const 86) "}")
  (data (i32.const 96) "unknown step `")
  (data (i32.const 112) "`: this component exports the steps `wrap`")

  (global $MANIFEST i32 (i32.const 32))
  ;; result<payload, step-failure>, 16 bytes: case byte at 0 (0 ok, 1 err),
  ;; string ptr/len at 4/8, and for err the `permanent` flag at 12.
  (global $RESULT i32 (i32.const 48))
  (global $heap (mut i32) (i32.const 1024))

  ;; A bump allocator that never frees: memory lives as long as the
  ;; instance, and the host gives every step attempt a fresh one.
  (func $alloc (param $align i32) (param $size i32) (result i32)
    (local $ptr i32)
    (local $end i32)
    ;; Round the heap top up to $align, a power of two.
    (local.set $ptr
      (i32.and
        (i32.add (global.get $heap) (i32.sub (local.get $align) (i32.const 1)))
        (i32.sub (i32.const 0) (local.get $align))))
    (local.set $end (i32.add (local.get $ptr) (local.get $size)))
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
    (local.get $ptr))

  (func (export "cabi_realloc")
    (param $old i32) (param $old_size i32) (param $align i32) (param $new_size i32)
    (result i32)
    (local $new i32)
    (local.set $new (call $alloc (local.get $align) (local.get $new_size)))
    ;; Keep what fits of the old block (nothing, for a fresh allocation).
    (memory.copy
      (local.get $new)
      (local.get $old)
      (select (local.get $old_size) (local.get $new_size)
        (i32.lt_u (local.get $old_size) (local.get $new_size))))
    (local.get $new))

  ;; Copies three strings into one new string; returns its ptr and len.
  (func $concat3
    (param $a i32) (param $a_len i32)
    (param $b i32) (param $b_len i32)
    (param $c i32) (param $c_len i32)
    (result i32 i32)
    (local $out i32)
    (local $len i32)
    (local.set $len
      (i32.add (i32.add (local.get $a_len) (local.get $b_len)) (local.get $c_len)))
    (local.set $out (call $alloc (i32.const 1) (local.get $len)))
    (memory.copy (local.get $out) (local.get $a) (local.get $a_len))
    (memory.copy
      (i32.add (local.get $out) (local.get $a_len)) (local.get $b) (local.get $b_len))
    (memory.copy
      (i32.add (local.get $out) (i32.add (local.get $a_len) (local.get $b_len)))
      (local.get $c) (local.get $c_len))
    (local.get $out)
    (local.get $len))

  (func $is_wrap (param $name i32) (param $len i32) (result i32)
    ;; Check the length first: a shorter name may end at the end of memory.
    (if (result i32) (i32.ne (local.get $len) (i32.const 4))
      (then (i32.const 0))
      ;; "wrap" read as a little-endian i32.
      (else (i32.eq (i32.load (local.get $name)) (i32.const 0x70617277)))))

  (func (export "stepstone:workflow/step@0.1.0#run-step")
    (param $name i32) (param $name_len i32) (param $input i32) (param $input_len i32)
    (result i32)
    (local $ptr i32)
    (local $len i32)
    (if (call $is_wrap (local.get $name) (local.get $name_len))
      (then
        (call $concat3
          (i32.const 64) (i32.const 22)
          (local.get $input) (local.get $input_len)
          (i32.const 86) (i32.const 1))
        (local.set $len)
        (local.set $ptr)
        (i32.store8 (global.get $RESULT) (i32.const 0)))
      (else
        (call $concat3
          (i32.const 96) (i32.const 14)
          (local.get $name) (local.get $name_len)
          (i32.const 112) (i32.const 42))
        (local.set $len)
        (local.set $ptr)
        (i32.store8 (global.get $RESULT) (i32.const 1))
        ;; Permanent: no retry makes an unknown step exist.
        (i32.store8 offset=12 (global.get $RESULT) (i32.const 1))))
    (i32.store offset=4 (global.get $RESULT) (local.get $ptr))
    (i32.store offset=8 (global.get $RESULT) (local.get $len))
    (global.get $RESULT))

  (func (export "stepstone:workflow/describe@0.1.0#describe") (result i32)
    (global.get $MANIFEST)))
