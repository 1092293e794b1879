"""The summary grammar: a pure parser that accepts exactly one shape and
says precisely why it refuses anything else (DESIGN.md §7)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopruntime.summary import (
    MAX_SUMMARY_CHARS,
    SECTIONS,
    Summary,
    SummaryError,
    parse_summary,
    render_summary,
)

VALID = """
<conversation_summary>
  <goal>Ship the release &amp; tell the team</goal>
  <constraints>never deploy on Fridays</constraints>
  <decisions>version 2.1; changelog written</decisions>
  <state>tests pass; waiting for approval &lt;deploy&gt;</state>
  <open_items></open_items>
</conversation_summary>
"""


def summary_text(**sections: str) -> str:
    """A summary with the given raw section bodies (default: valid ones)."""
    body = {"goal": "g", "constraints": "", "decisions": "", "state": "s", "open_items": ""}
    body.update(sections)
    inner = "".join(f"<{name}>{body[name]}</{name}>" for name in SECTIONS)
    return f"<conversation_summary>{inner}</conversation_summary>"


def refused(text: str) -> str:
    with pytest.raises(SummaryError) as info:
        parse_summary(text)
    return str(info.value)


def test_valid_summary_is_parsed_unescaped_and_stripped() -> None:
    assert parse_summary(VALID) == Summary(
        goal="Ship the release & tell the team",
        constraints="never deploy on Fridays",
        decisions="version 2.1; changelog written",
        state="tests pass; waiting for approval <deploy>",
        open_items="",
    )


def test_render_is_the_inverse_of_parse() -> None:
    parsed = parse_summary(VALID)
    assert parse_summary(render_summary(parsed)) == parsed


@pytest.mark.parametrize("missing", SECTIONS)
def test_each_missing_section_is_named(missing: str) -> None:
    inner = "".join(f"<{s}>x</{s}>" for s in SECTIONS if s != missing)
    reason = refused(f"<conversation_summary>{inner}</conversation_summary>")
    assert reason.startswith(f"<{missing}> is missing"), reason


def test_sections_out_of_order() -> None:
    order = ["goal", "decisions", "constraints", "state", "open_items"]
    inner = "".join(f"<{s}>x</{s}>" for s in order)
    reason = refused(f"<conversation_summary>{inner}</conversation_summary>")
    assert reason == "<decisions> is out of order: expected <constraints> here"


def test_a_repeated_section() -> None:
    text = summary_text(open_items="x</open_items><goal>again</goal><open_items>")
    # The first </open_items> closes the section; what follows is refused.
    assert refused(text) == "<goal> appears more than once"
    twice = "<goal>a</goal><goal>b</goal>"
    reason = refused(f"<conversation_summary>{twice}</conversation_summary>")
    assert reason == "<goal> appears more than once"


def test_nested_element() -> None:
    reason = refused(summary_text(decisions="use <b>bold</b> here"))
    assert reason == "<decisions> holds a nested element <b>; only escaped text is allowed"


def test_raw_less_than() -> None:
    reason = refused(summary_text(state="a < b"))
    assert reason == "<state> holds a raw '<'; only escaped text is allowed"


def test_cdata_section() -> None:
    reason = refused(summary_text(goal="<![CDATA[ship it]]>"))
    assert reason == "<goal> holds a CDATA section; only escaped text is allowed"
    # CDATA that hides a closing tag is still CDATA, not an early close.
    reason = refused(summary_text(goal="<![CDATA[</goal>]]>"))
    assert "CDATA" in reason


def test_trailing_text_after_the_root() -> None:
    reason = refused(summary_text() + "\nHope this helps!")
    assert reason == "text after </conversation_summary> is not allowed: 'Hope this helps!'"


def test_text_between_sections() -> None:
    inner = "<goal>g</goal>by the way<constraints></constraints>"
    inner += "<decisions></decisions><state>s</state><open_items></open_items>"
    reason = refused(f"<conversation_summary>{inner}</conversation_summary>")
    assert reason == "expected <constraints>, found 'by the way<constraints></constraints><de'"


def test_content_after_the_last_section() -> None:
    text = summary_text().replace(
        "</conversation_summary>", "<extra>1</extra></conversation_summary>"
    )
    assert refused(text) == "unexpected content after </open_items>: '<extra>1</extra>'"


def test_unknown_element_in_place_of_a_section() -> None:
    text = summary_text().replace("<goal>g</goal>", "<aim>g</aim>")
    assert refused(text) == "unexpected element <aim>: expected <goal>"


def test_attributes_on_a_section() -> None:
    text = summary_text().replace("<goal>", '<goal lang="en">')
    assert refused(text) == "<goal> must not carry attributes"


def test_unclosed_section() -> None:
    text = "<conversation_summary><goal>g</conversation_summary>"
    assert refused(text) == "<goal> is not closed"


def test_prose_and_missing_root() -> None:
    assert refused("Sure! Here is a summary: we shipped it.").startswith(
        "summary must start with <conversation_summary>"
    )
    assert refused("```xml\n" + summary_text() + "\n```").startswith("summary must start with")
    assert refused("<conversation_summary><goal>g</goal>") == (
        "summary has no closing </conversation_summary>"
    )
    assert refused("   ") == "summary is empty"


@pytest.mark.parametrize("section", ["goal", "state"])
def test_required_sections_must_not_be_empty(section: str) -> None:
    assert refused(summary_text(**{section: "  \n "})) == f"<{section}> must not be empty"


def test_unknown_entity_and_bare_ampersand() -> None:
    assert "unknown entity or an unescaped '&'" in refused(summary_text(goal="fish & chips"))
    assert "unknown entity" in refused(summary_text(goal="&nbsp;"))
    assert "unknown entity" in refused(summary_text(goal="&#60;"))


def test_entities_decode_in_one_pass() -> None:
    parsed = parse_summary(summary_text(goal="&amp;lt; &quot;q&quot; &apos;a&apos; &gt;"))
    assert parsed.goal == "&lt; \"q\" 'a' >"


def test_size_limit() -> None:
    huge = summary_text(decisions="x" * (5 * 1024 * 1024))
    reason = refused(huge)
    assert reason == (
        f"summary is {len(huge)} characters, more than the {MAX_SUMMARY_CHARS} allowed"
    )
    assert parse_summary(summary_text(decisions="x" * (MAX_SUMMARY_CHARS - 200))).decisions


# Any text a model or a person might put in a section: markup characters,
# entity look-alikes, quotes, unicode, newlines.  Leading and trailing
# whitespace is not significant in the grammar, so it is stripped.
section_text = st.text(
    alphabet=st.characters(codec="utf-8") | st.sampled_from("<>&\"';/![]"),
    max_size=200,
).map(str.strip)
required_text = section_text.filter(bool)


@given(
    goal=required_text,
    constraints=section_text,
    decisions=section_text,
    state=required_text,
    open_items=section_text,
)
def test_round_trip_of_escaped_text(
    goal: str, constraints: str, decisions: str, state: str, open_items: str
) -> None:
    summary = Summary(
        goal=goal, constraints=constraints, decisions=decisions, state=state, open_items=open_items
    )
    rendered = render_summary(summary)
    assert parse_summary(rendered) == summary
    # Only the grammar's own elements appear as markup in the rendering.
    assert rendered.count("<") == 2 + 2 * len(SECTIONS)


@given(st.text(max_size=300))
def test_parser_is_total(text: str) -> None:
    """Any text is either a summary or a SummaryError with a reason."""
    try:
        parse_summary(text)
    except SummaryError as exc:
        assert str(exc)
