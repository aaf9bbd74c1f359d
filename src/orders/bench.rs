//! `haita bench orders`: orders per second through the service, next to the same statements
//! issued by hand — written below.
