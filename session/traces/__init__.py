"""A session's journal read as OpenTelemetry traces: a read-only projection over the
embedded runtime, structured by the unified model replay builds."""
