"""The replay engine: what the model is sent. Options, the fold of events into per-message
plans, the render into OpenAI or Anthropic wire messages, live tool rounds, and token pressure.
Pure: no I/O. (Named ``engine`` because ``convstore.replay`` is the public replay function.)"""
