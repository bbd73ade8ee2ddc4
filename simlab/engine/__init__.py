"""The sweep machinery: config, sweep, chunk store, results, compile cache. Knows only the
Lab protocol (seed_state, point), nothing about Transformers (docs/design.md, "Layout of the
package")."""
