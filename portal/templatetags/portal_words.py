from django import template

from portal.reviews import quorum, words

register = template.Library()
register.filter("quorum", quorum.quorum_of)
register.filter("reason_words", words.reason_words)
register.filter("tool_words", words.tool_words)
register.filter("outcome_words", words.outcome_words)
register.filter("agent_words", words.agent_words)
