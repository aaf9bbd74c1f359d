//! Errors declared once: each variant's status and stable code, and the OpenAPI document's
//! error responses derived from the same declaration.
//!
//! A feature declares what its error enum answers next to the enum, with [`answers!`]:
//!
//! ```text
//! answers! { BookingError {
//!     PastDate => UNPROCESSABLE_ENTITY "past_date" [in_place],
//!     FullyBooked => CONFLICT "fully_booked" [kept, in_place],
//!     ReservationNotFound => NOT_FOUND "not_found",
//!     …
//! } carries { Idempotency, Infra } }
//! ```
//!
//! The declaration is a `match` over the enum, so a new variant without an answer does not
//! compile. What else the app does with an answer is declared on the same line: `[kept]`, the
//! refusal is stored under the request's idempotency key ([`Declared::is_kept`]); `[in_place]`,
//! a page says it next to the form that sent it ([`Declared::is_answered_in_place`]). The feature's `AsProblem::problem` then starts every answer from
//! `self.answer()` and adds only the sentence (`.said(key, args)`) and the facts a client can act
//! on. An endpoint's annotation names the variants it can answer with, through
//! [`documented_answers!`], and the document lists their statuses and codes as declared: a
//! changed status changes the document, and a misspelt variant does not compile.

use std::collections::BTreeMap;

use actix_web::http::StatusCode;
use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder, response::Response};

use super::error::{AsProblem, Problem};

/// The status and the stable code of an answer: what a client relies on and the OpenAPI
/// document lists; and what the app does with it besides sending it, declared with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answer {
    pub status: StatusCode,
    pub code: &'static str,
    /// Declared `[kept]`: what the request's data decided (the day was full, the stock short),
    /// so the same request would be refused the same way a second later. Such a refusal is the
    /// answer stored under the request's idempotency key, and a resend gets it back
    /// (`crate::idempotency`); any other refusal leaves no trace and a resend is decided again.
    pub kept: bool,
    /// Declared `[in_place]`: a page answers it next to the form that sent it (the day, the
    /// product), not with a page of its own.
    pub in_place: bool,
}

impl Answer {
    /// A bounded wait ran out (a lock, the pool, a hashing slot): try again after `Retry-After`.
    pub const BUSY: Self = Self::new(StatusCode::SERVICE_UNAVAILABLE, "busy");
    /// The database cannot be reached: try again after `Retry-After`.
    pub const UNAVAILABLE: Self = Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable");
    /// This instance is shutting down and turned the request away before starting on it: send
    /// it again after `Retry-After` (a load balancer sends it to another instance).
    pub const DRAINING: Self = Self::new(StatusCode::SERVICE_UNAVAILABLE, "draining");
    /// A bug: logged with its cause, never documented as an answer.
    pub const INTERNAL: Self = Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal");

    pub const fn new(status: StatusCode, code: &'static str) -> Self {
        Self { status, code, kept: false, in_place: false }
    }

    /// Marks the answer `[kept]`.
    pub const fn kept(self) -> Self {
        Self { kept: true, ..self }
    }

    /// Marks the answer `[in_place]`.
    pub const fn in_place(self) -> Self {
        Self { in_place: true, ..self }
    }

    /// This answer, saying the text `key` of `src/i18n/texts.yml` with its `%{name}`s filled from
    /// `args` (a page says it in its reader's language; JSON carries the English). The one way
    /// an answer says something: every sentence is a text, so none is English on a Japanese page.
    pub fn said(self, key: &'static str, args: &[(&'static str, String)]) -> Problem {
        Problem::words(self.status, self.code, key, args)
    }
}

/// An error enum whose answers are declared with [`answers!`].
pub trait Declared: AsProblem {
    /// Each variant that answers for itself, by name, with what it answers (a variant may be
    /// declared more than once when its answer depends on what it carries).
    const ANSWERS: &'static [(&'static str, Answer)];

    /// This error's answer: its variant's declaration, or the answer of the error it carries.
    fn answer(&self) -> Answer;

    /// Whether this refusal is the answer a resend gets back (declared `[kept]`).
    fn is_kept(&self) -> bool {
        self.answer().kept
    }

    /// Whether a page answers this next to its form (declared `[in_place]`).
    fn is_answered_in_place(&self) -> bool {
        self.answer().in_place
    }
}

/// What a carried error answers (`carries { … }` in [`answers!`]): an error declared with
/// [`answers!`] its own answer, marks included; any other (a [`Problem`], the infrastructure's
/// errors) the status and code of its problem, and no mark.
pub trait Carried {
    fn carried_answer(&self) -> Answer;
}

impl<E: Declared> Carried for E {
    fn carried_answer(&self) -> Answer {
        self.answer()
    }
}

impl Carried for Problem {
    fn carried_answer(&self) -> Answer {
        Answer::new(self.status, self.error)
    }
}

/// Declares what each variant of an error enum answers: `Variant => STATUS "code"`, where
/// `STATUS` names a [`StatusCode`] constant, then its marks if any (`[kept, in_place]`, see
/// [`Answer`]). A variant whose answer depends on what it holds is
/// declared once per case, with a pattern and a guard (`Guard(GuardError::Busy { .. }) => …`,
/// `RaceOnly(s) if s.is_correct() => …`), the first that fits winning. Variants listed under
/// `carries` hold another error and answer what it answers.
macro_rules! answers {
    (
        $error:ident {
            $(
                $variant:ident $( ( $($inner:tt)* ) )? $( if $guard:expr )?
                    => $status:ident $code:literal $( [ $( $mark:ident ),* ] )?
            ),* $(,)?
        }
        $( carries { $( $carried:ident ),* $(,)? } )?
    ) => {
        impl $crate::wire::answers::Declared for $error {
            const ANSWERS: &'static [(&'static str, $crate::wire::answers::Answer)] = &[
                $( (
                    stringify!($variant),
                    $crate::wire::answers::Answer::new(actix_web::http::StatusCode::$status, $code)
                        $( $( .$mark() )* )?,
                ), )*
            ];

            fn answer(&self) -> $crate::wire::answers::Answer {
                match self {
                    $(
                        $crate::wire::answers::answers!(@variant $variant $( ( $($inner)* ) )?)
                        $( if $guard )?
                        => $crate::wire::answers::Answer::new(actix_web::http::StatusCode::$status, $code)
                            $( $( .$mark() )* )?,
                    )*
                    $($(
                        Self::$carried(carried) => $crate::wire::answers::Carried::carried_answer(carried),
                    )*)?
                }
            }
        }
    };
    (@variant $variant:ident ( $($inner:tt)* )) => { Self::$variant( $($inner)* ) };
    (@variant $variant:ident) => { Self::$variant { .. } };
}
pub(crate) use answers;

/// Everything the variants `variants` of `E` answer, as declared.
///
/// # Panics
/// When `E` declares no variant of one of those names: a variant that exists but answers
/// through an error it carries is documented by naming that error's variants instead.
pub fn answers_of<E: Declared>(variants: &[&str]) -> Vec<Answer> {
    let mut answers = Vec::new();
    for variant in variants {
        let before = answers.len();
        answers.extend(E::ANSWERS.iter().filter(|(name, _)| name == variant).map(|&(_, answer)| answer));
        assert!(
            answers.len() > before,
            "{} declares no answer of its own for {variant}: name the variants of the error it carries",
            std::any::type_name::<E>()
        );
    }
    answers
}

/// The OpenAPI responses of `answers`: one per status, listing its codes.
pub fn responses(answers: &[Answer]) -> BTreeMap<String, RefOr<Response>> {
    let mut codes: BTreeMap<u16, Vec<&'static str>> = BTreeMap::new();
    for answer in answers {
        let listed = codes.entry(answer.status.as_u16()).or_default();
        if !listed.contains(&answer.code) {
            listed.push(answer.code);
        }
    }
    codes
        .into_iter()
        .map(|(status, codes)| {
            let body = ContentBuilder::new().schema(Some(Ref::from_schema_name("ErrorBody"))).build();
            let response =
                ResponseBuilder::new().description(codes.join(", ")).content("application/json", body);
            (status.to_string(), response.into())
        })
        .collect()
}

/// A type for an endpoint's `#[utoipa::path(responses(…))]` that documents the errors it
/// answers with, by naming their variants:
///
/// ```text
/// documented_answers!(BookAnswers: BookingError[FullyBooked, AlreadyBooked], IdempotencyError[Reused]);
/// ```
///
/// What the document says of each (status, code) comes from the variants' [`answers!`]. The
/// answers every operation of a kind shares (401, 403, 415, 503, …) are added by
/// `crate::openapi` and need not be named.
macro_rules! documented_answers {
    ($name:ident: $( $error:ident [ $( $variant:ident ),+ $(,)? ] ),+ $(,)?) => {
        /// The errors one endpoint answers with, as its `responses(…)` lists them.
        pub struct $name;

        impl utoipa::IntoResponses for $name {
            fn responses() -> std::collections::BTreeMap<
                String,
                utoipa::openapi::RefOr<utoipa::openapi::response::Response>,
            > {
                let mut answers = Vec::new();
                $(
                    answers.extend($crate::wire::answers::answers_of::<$error>(&[$( stringify!($variant) ),+]));
                )+
                $crate::wire::answers::responses(&answers)
            }
        }

        // Each name is a variant of its enum, or this does not compile.
        $(
            const _: fn(&$error) -> bool = |error| matches!(error, $( $error::$variant { .. } )|+);
        )+
    };
}
pub(crate) use documented_answers;

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    enum Example {
        #[error("gone")]
        Gone,
        #[error("held by {0}")]
        Held(u32),
        #[error("odd {0}")]
        Odd(u32),
        #[error(transparent)]
        Other(#[from] Carrier),
    }

    #[derive(Debug, thiserror::Error)]
    #[error("carried")]
    struct Carrier;

    impl AsProblem for Carrier {
        fn problem(&self) -> Problem {
            Problem::busy("busy.server")
        }
    }

    impl Carried for Carrier {
        fn carried_answer(&self) -> Answer {
            Answer::new(StatusCode::SERVICE_UNAVAILABLE, "busy")
        }
    }

    answers! { Example {
        Gone => NOT_FOUND "not_found",
        Held(0) => CONFLICT "held_by_nobody",
        Held => CONFLICT "held" [kept, in_place],
        Odd(n) if n % 2 == 1 => UNPROCESSABLE_ENTITY "odd",
        Odd => UNPROCESSABLE_ENTITY "even" [in_place],
    } carries { Other } }

    impl AsProblem for Example {
        fn problem(&self) -> Problem {
            match self {
                Self::Other(carried) => carried.problem(),
                _ => self.answer().said("test.greeting", &[("name", self.to_string())]),
            }
        }
    }

    documented_answers!(ExampleAnswers: Example[Gone, Held]);

    #[test]
    fn a_variant_answers_as_its_first_fitting_declaration() {
        assert_eq!(Example::Gone.answer(), Answer::new(StatusCode::NOT_FOUND, "not_found"));
        assert_eq!(Example::Held(0).answer().code, "held_by_nobody");
        assert_eq!(Example::Held(7).answer().code, "held");
        assert_eq!(Example::Odd(3).answer().code, "odd");
        assert_eq!(Example::Odd(4).answer().code, "even");
        assert_eq!(Example::Other(Carrier).answer(), Answer::new(StatusCode::SERVICE_UNAVAILABLE, "busy"));
    }

    #[test]
    fn a_variant_is_kept_and_answered_in_place_only_as_its_declaration_says() {
        assert!(Example::Held(7).is_kept() && Example::Held(7).is_answered_in_place());
        assert!(!Example::Held(0).is_kept() && !Example::Held(0).is_answered_in_place(), "another case");
        assert!(!Example::Odd(4).is_kept() && Example::Odd(4).is_answered_in_place());
        assert!(!Example::Gone.is_kept() && !Example::Gone.is_answered_in_place());
        assert!(!Example::Other(Carrier).is_kept(), "a carried error without marks");
    }

    #[test]
    fn the_document_lists_each_status_once_with_every_code_declared_for_it() {
        use utoipa::IntoResponses;
        let responses = serde_json::to_value(ExampleAnswers::responses()).expect("responses are JSON");
        assert_eq!(responses["404"]["description"], "not_found");
        assert_eq!(responses["409"]["description"], "held_by_nobody, held");
        assert_eq!(
            responses["409"]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/ErrorBody"
        );
        assert!(responses.get("422").is_none(), "Odd was not named");
    }

    #[test]
    #[should_panic(expected = "declares no answer of its own for Other")]
    fn a_carrying_variant_is_documented_by_what_it_carries() {
        answers_of::<Example>(&["Other"]);
    }
}
