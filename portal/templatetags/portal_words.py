from django import template

from portal.reviews import quorum, words

register = template.Library()
register.filter("quorum", quorum.quorum_of)
register.filter("reason_words", words.reason_words)
register.filter("tool_words", words.tool_words)
register.filter("outcome_words", words.outcome_words)
register.filter("agent_words", words.agent_words)
register.filter("action_words", words.action_words)
register.filter("action_tone", words.action_tone)
register.filter("outcome_tone", words.outcome_tone)
register.filter("decided_by", words.decided_by_words)
