//! Carrying a span's context across processes: as the [`TraceContext`] a
//! task keeps (store row, queue message, claim), and as the `traceparent`
//! and `tracestate` headers of an outbound request.
//!
//! Each helper is a no-op when no OpenTelemetry layer is installed (the
//! span has no OpenTelemetry context), so callers need not ask.

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use waft_core::TraceContext;

/// Makes `parent` the parent of `span`, or makes `span` the root of a new
/// trace when there is none. Call it before the span is first entered.
pub fn set_parent(span: &tracing::Span, parent: Option<&TraceContext>) {
    if span.is_disabled() {
        return;
    }
    let cx = match parent {
        Some(parent) => {
            let mut carrier = HashMap::with_capacity(2);
            carrier.insert("traceparent".to_owned(), parent.traceparent.clone());
            if let Some(state) = &parent.tracestate {
                carrier.insert("tracestate".to_owned(), state.clone());
            }
            TraceContextPropagator::new()
                .extract_with_context(&opentelemetry::Context::new(), &carrier)
        }
        None => opentelemetry::Context::new(),
    };
    // Refused only when no layer is installed or the span has started:
    // either way the span keeps the parent it has.
    let _ = span.set_parent(cx);
}

/// The context a child of `span` in another process continues from; `None`
/// when the span is not recorded by OpenTelemetry.
pub fn context_of(span: &tracing::Span) -> Option<TraceContext> {
    if span.is_disabled() {
        return None;
    }
    let cx = span.context();
    let otel = cx.span();
    let sc = otel.span_context();
    if !sc.is_valid() {
        return None;
    }
    let state = sc.trace_state().header();
    Some(TraceContext {
        traceparent: format!(
            "00-{}-{}-{:02x}",
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags().to_u8() & 1
        ),
        tracestate: (!state.is_empty()).then_some(state),
    })
}

/// Writes `span`'s context into an outgoing request's headers as
/// `traceparent` (and `tracestate`), replacing any the lambda set; leaves
/// them alone when the span is not recorded.
pub fn inject(span: &tracing::Span, headers: &mut http::HeaderMap) {
    let Some(cx) = context_of(span) else {
        return;
    };
    let mut put = |name: &'static str, value: &str| {
        if let Ok(value) = http::HeaderValue::from_str(value) {
            headers.insert(name, value);
        }
    };
    put("traceparent", &cx.traceparent);
    match &cx.tracestate {
        Some(state) => put("tracestate", state),
        None => {
            headers.remove("tracestate");
        }
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry_sdk::trace::SdkTracerProvider;
    use tracing_subscriber::prelude::*;

    use super::*;

    const CLIENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn subscriber() -> impl tracing::Subscriber + Send + Sync {
        use opentelemetry::trace::TracerProvider as _;
        let provider = SdkTracerProvider::builder().build();
        tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")))
    }

    #[test]
    fn a_child_continues_its_parents_trace_and_headers_carry_it() {
        tracing::subscriber::with_default(subscriber(), || {
            let parent = TraceContext::parse(CLIENT, Some("k=v")).unwrap();
            let span = tracing::info_span!("schedule");
            set_parent(&span, Some(&parent));
            let cx = context_of(&span).unwrap();
            assert_eq!(cx.trace_id(), parent.trace_id());
            assert_ne!(cx.span_id(), parent.span_id());
            assert!(cx.sampled());
            assert_eq!(cx.tracestate.as_deref(), Some("k=v"));

            let mut headers = http::HeaderMap::new();
            headers.insert("traceparent", "forged".parse().unwrap());
            inject(&span, &mut headers);
            assert_eq!(headers["traceparent"], cx.traceparent.as_str());
            assert_eq!(headers["tracestate"], "k=v");
        });
    }

    #[test]
    fn a_task_without_a_trace_starts_one() {
        tracing::subscriber::with_default(subscriber(), || {
            let outer = tracing::info_span!("outer");
            let _entered = outer.enter();
            let span = tracing::info_span!("enqueue");
            set_parent(&span, None);
            let cx = context_of(&span).unwrap();
            assert_ne!(cx.trace_id(), context_of(&outer).unwrap().trace_id());
        });
    }

    #[test]
    fn without_a_layer_nothing_is_carried() {
        let span = tracing::info_span!("execute");
        set_parent(&span, TraceContext::parse(CLIENT, None).ok().as_ref());
        assert_eq!(context_of(&span), None);
        let mut headers = http::HeaderMap::new();
        inject(&span, &mut headers);
        assert!(headers.is_empty());
    }
}
