//! The bench's step as an Obelisk activity: returns its input unchanged.

wit_bindgen::generate!({ path: "../wit", world: "activity" });

struct Noop;

impl exports::bench::obelisk::noop::Guest for Noop {
    fn noop(i: u32) -> Result<u32, ()> {
        Ok(i)
    }
}

export!(Noop);
