"""The Gradio demo app: masked words, attention, sentiment, question answering, named entities.

    python -m app [--models assets/models] [--backend {litert,keras}] [--host 127.0.0.1]
                  [--port 7860] [--share]

`app.models` finds and loads the models, `app.predict` turns their answers into what the views
show (plain functions, no server needed), `app.ui` lays out the views and wires their events,
`app.__main__` parses the flags and launches. Importing `app` imports nothing heavy.
"""
