"""A conversation as token ids, recorded once for rollouts and sessions alike.

Rollout episodes, sessions and the OpenAI routes share these: nothing is decoded and
re-tokenized, and every episode is recorded by the one recorder.

    codec.py       ChatCodec: messages to token ids once (the first prompt, then each new
                   batch of messages by template diffing); tool instructions
    transcript.py  the per-turn invariant: each prompt extends the last one
    toolcalls.py   tool calls parsed out of the model's text (OpenAI's ``tool_calls``)
    recording.py   EpisodeRecorder: the one episode record (only the model's own actions
                   earn reward; anything non-finite makes it invalid), and the env's step
"""
