"""The main window and its parts: menus, status bar, sidebar, layout."""
