return {incarnation(), fmt(current_revision())}
