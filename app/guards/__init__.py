"""What comes into the dashboard from outside, checked before it is used or shown: a link's values, an uploaded
file, text shown as it is, and CSV cells a spreadsheet would run.

  url_state      each control's value mirrored into the URL, and a link's value checked (cast, options, bounds)
  uploads        the Behaviour page's CSV upload, read or refused in one line
  literal_text   text from a link or a file shown by Streamlit as text, never as markdown
  csv_safety     downloaded CSV files whose text cells a spreadsheet does not run as formulas

They import nothing of the dashboard outside this folder.
"""
