//! The bench's workflow as an Obelisk workflow: `n` calls of the `noop`
//! activity, one after another, each a child execution Obelisk persists
//! before the workflow sees its result.

wit_bindgen::generate!({ path: "../wit", world: "workflow-component" });

use bench::obelisk::noop::noop;

struct Steps;

impl exports::bench::obelisk::workflow::Guest for Steps {
    fn steps(n: u32) -> Result<u64, ()> {
        let mut sum = 0;
        for i in 0..n {
            sum += u64::from(noop(i)?);
        }
        Ok(sum)
    }
}

export!(Steps);
