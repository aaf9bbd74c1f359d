//! Starting a flash sale from `/demo`.
