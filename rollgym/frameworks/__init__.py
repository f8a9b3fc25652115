"""Agent frameworks on rollgym sessions, the plumbing hidden: each framework's model at the
session's base URL and the env's tools as that framework's tools, run call by call.

    session.py         AgentSession: open, base URL, run a tool call by its id, step, close
    openai_agents.py   the OpenAI Agents SDK (``agents``): model, tools, tool_use_behavior
    langchain.py       LangChain (``langchain-openai``): ChatOpenAI, StructuredTools
    pydantic_ai.py     pydantic-ai: OpenAIChatModel, Tools

The frameworks come with the ``agents`` extra (``pip install 'rollgym[agents]'``).
"""
